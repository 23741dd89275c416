# Sourced by every step of action.yml (each step is a shell of its own).

# split_args NAME STRING: split STRING into the array NAME the way a POSIX shell splits words (quotes honoured,
# nothing expanded). The words come back shlex-quoted, so eval only ever assigns literal strings.
split_args() {
  local quoted
  quoted=$("$INPUT_PYTHON" -c 'import shlex, sys; print(" ".join(map(shlex.quote, shlex.split(sys.argv[1]))))' "$2")
  eval "$1=($quoted)"
}
