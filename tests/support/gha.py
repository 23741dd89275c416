"""A small GitHub-Actions runner for the composite Action (action.yml), as tests/house/test_ci_action.py runs it: every
`run:` step, with `${{ ... }}` expressions substituted, its `env:` set, GITHUB_ACTION_PATH / GITHUB_OUTPUT /
GITHUB_ENV / GITHUB_STEP_SUMMARY provided, through `bash --noprofile --norc -eo pipefail FILE` in the workspace;
`if:` conditions evaluated (an `if:` without a status function means `success() && ...`); `uses:` steps are not
run, but their `with:` is evaluated. Also what a workflow provides around it: the checked-out action and the Python
of actions/setup-python."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ACTION_FILE = REPO / "action.yml"


def load_action() -> dict:
    return yaml.safe_load(ACTION_FILE.read_text())


def base_env(path_first: Path | None = None) -> dict[str, str]:
    """The environment steps and make see: no runner variables of our own runner, no PYTHONPATH (the installed
    package must be the one imported), nothing that could reach a network."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_", "EAGLE_")) and k not in ("PYTHONPATH", "MAKEFLAGS")}
    env.update(HF_HUB_OFFLINE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1",
               OMP_NUM_THREADS="1")  # tiny models: more torch threads only contend on a shared machine
    env.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    return env


# ---------------------------------------------------------------------------------------------------------------
# GitHub expressions: the subset action.yml uses. Anything else fails loudly, so the runner here never silently
# disagrees with GitHub's.

_TOKEN = re.compile(r"\s*(?:(\|\||&&|==|!=|!|\(|\))|'((?:[^']|'')*)'|([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)(\(\))?)")
_STATUS_FUNCTIONS = ("success()", "failure()", "always()", "cancelled()")


class Expr:
    def __init__(self, text: str, context: dict, ok: bool):
        self.tokens, pos = [], 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise AssertionError(f"unsupported expression syntax in {text!r} at {text[pos:]!r}")
            op, literal, name, call = m.groups()
            self.tokens.append(("op", op) if op else ("str", literal.replace("''", "'")) if literal is not None
                               else ("call", name) if call else ("ref", name))
            pos = m.end()
        self.context, self.ok, self.text = context, ok, text

    def value(self):
        self.i = 0
        result = self._or()
        if self.i != len(self.tokens):
            raise AssertionError(f"unsupported expression {self.text!r}")
        return result

    def _peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else (None, None)

    def _or(self):
        left = self._and()
        while self._peek() == ("op", "||"):
            self.i += 1
            right = self._and()
            left = left or right
        return left

    def _and(self):
        left = self._cmp()
        while self._peek() == ("op", "&&"):
            self.i += 1
            right = self._cmp()
            left = left and right
        return left

    def _cmp(self):
        left = self._unary()
        if self._peek() in (("op", "=="), ("op", "!=")):
            op = self.tokens[self.i][1]
            self.i += 1
            right = self._unary()
            same = str(left).lower() == str(right).lower()  # GitHub compares strings case-insensitively
            return same if op == "==" else not same
        return left

    def _unary(self):
        if self._peek() == ("op", "!"):
            self.i += 1
            return not self._unary()
        kind, value = self._peek()
        self.i += 1
        if (kind, value) == ("op", "("):
            inner = self._or()
            assert self._peek() == ("op", ")"), self.text
            self.i += 1
            return inner
        if kind == "str":
            return value
        if kind == "call":
            return {"always": True, "success": self.ok, "failure": not self.ok, "cancelled": False}[value]
        if kind == "ref":
            return self._ref(value)
        raise AssertionError(f"unsupported expression {self.text!r}")

    def _ref(self, name: str) -> str:
        parts = name.split(".")
        if parts[0] == "inputs" and len(parts) == 2:
            if parts[1] not in self.context["inputs"]:
                raise AssertionError(f"${{{{ {name} }}}}: no such input")
            return self.context["inputs"][parts[1]]
        if parts == ["github", "action_path"]:
            return self.context["action_path"]
        if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
            return self.context["steps"].get(parts[1], {}).get(parts[3], "")
        raise AssertionError(f"unsupported context reference {name!r}")


def substitute(text: str, context: dict) -> str:
    """Every ${{ expr }} in a string, replaced by its value, as the runner does before a step starts."""
    def one(m):
        value = Expr(m.group(1), context, True).value()
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(text), flags=re.S)


def condition(text: str | None, context: dict, ok: bool) -> bool:
    if text is None:
        return ok
    expr = str(text).strip()
    if expr.startswith("${{") and expr.endswith("}}"):
        expr = expr[3:-2]
    if not any(f in expr.replace(" ", "") for f in _STATUS_FUNCTIONS):
        expr = f"success() && ({expr})"
    value = Expr(expr, context, ok).value()
    return value if isinstance(value, bool) else value != ""


# ---------------------------------------------------------------------------------------------------------------
# Running the Action

def read_kv_file(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT / GITHUB_ENV syntax: `name=value` lines and `name<<DELIMITER` blocks."""
    out, lines = {}, path.read_text().splitlines() if path.exists() else []
    it = iter(lines)
    for line in it:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            block = []
            for inner in it:
                if inner == delimiter:
                    break
                block.append(inner)
            out[name] = "\n".join(block)
        elif line:
            name, value = line.split("=", 1)
            out[name] = value
    return out


@dataclass
class StepRun:
    id: str
    ran: bool
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    with_: dict = field(default_factory=dict)  # uses: steps, evaluated


@dataclass
class ActionRun:
    steps: dict[str, StepRun]
    outputs: dict[str, str]
    summary: str

    def log(self) -> str:
        return "\n".join(f"--- {s.id} rc={s.returncode}\n{s.stdout}\n{s.stderr}" for s in self.steps.values() if s.ran)


def run_action(inputs: dict[str, str], *, workspace: Path, action_path: Path, path_first: Path | None) -> ActionRun:
    action = load_action()
    declared = action["inputs"]
    for name, spec in declared.items():
        if spec.get("required") and not inputs.get(name):
            raise AssertionError(f"required input {name} not given")
    unknown = set(inputs) - set(declared)
    assert not unknown, f"not inputs of the action: {unknown}"
    resolved = {name: str(spec.get("default", "")) for name, spec in declared.items()} | inputs
    context = {"inputs": resolved, "action_path": str(action_path), "steps": {}}
    runner_dir = Path(tempfile.mkdtemp(prefix=f"{workspace.name}-runner-", dir=workspace.parent))
    env = base_env(path_first) | {"GITHUB_ACTION_PATH": str(action_path), "GITHUB_WORKSPACE": str(workspace),
                                  "RUNNER_TEMP": str(runner_dir), "GITHUB_ACTIONS": "true", "CI": "true"}
    summary = runner_dir / "step_summary.md"
    steps, ok = {}, True
    for index, step in enumerate(action["runs"]["steps"]):
        sid = step.get("id", f"step{index}")
        if not condition(step.get("if"), context, ok):
            steps[sid] = StepRun(sid, ran=False)
            continue
        if "uses" in step:
            with_ = {k: substitute(v, context) for k, v in step.get("with", {}).items()}
            steps[sid] = StepRun(sid, ran=True, with_=with_)
            continue
        assert step.get("shell") == "bash", f"step {sid}: shell must be bash"
        script = runner_dir / f"{sid}.sh"
        script.write_text(substitute(step["run"], context))
        output_file, env_file = runner_dir / f"{sid}.output", runner_dir / f"{sid}.env"
        step_env = env | {k: substitute(v, context) for k, v in step.get("env", {}).items()} | {
            "GITHUB_OUTPUT": str(output_file), "GITHUB_ENV": str(env_file), "GITHUB_STEP_SUMMARY": str(summary)}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                              env=step_env, capture_output=True, text=True, timeout=300)
        context["steps"][sid] = read_kv_file(output_file)
        env |= read_kv_file(env_file)
        steps[sid] = StepRun(sid, True, proc.returncode, proc.stdout, proc.stderr)
        ok = ok and proc.returncode == 0
    outputs = {name: substitute(spec["value"], context) for name, spec in action.get("outputs", {}).items()}
    return ActionRun(steps, outputs, summary.read_text() if summary.exists() else "")


def checkout_action(dest: Path) -> Path:
    """A copy of what a workflow's `uses:` checks out (the project's files) at `dest`: pip's build writes build/ and
    *.egg-info beside the sources, which must not land in the working tree other tests and editors use."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(REPO / "src", dest / "src", ignore=ignore)
    shutil.copytree(REPO / "ci", dest / "ci", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "action.yml"):
        shutil.copy2(REPO / name, dest / name)
    return dest


def setup_python_venv(venv: Path) -> Path:
    """What actions/setup-python leaves: a `python3` first on PATH that pip installs into; its bin folder. Here a fresh
    venv at `venv` that sees this environment's site-packages through a .pth file (appended after its own, so what
    pip installs into it wins); not --system-site-packages, which would expose the base interpreter's packages, not
    this venv's."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    Path(own, "zz_dev_environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv / "bin"
