"""Draft vocabulary maps (`d2t` / `t2d`): the map type, the producers' selection rules, storage formats, the one
check every command runs, and the LM-head row permutation. Imports only checkpoint/, io/ and errors."""
