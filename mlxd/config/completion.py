"""``--completion-bash``: a bash completion script for ``mlxd-server``, generated from the option table.

The shape is llama-server's own script: option words complete from every spelling, and the word after an option
whose value is a path completes file names, after one with a fixed set of values those values.
"""

from __future__ import annotations

from mlxd.config.options import OptionTable, table

FUNCTION = "_mlxd_server_completions"
PROGRAMS = ("mlxd-server",)
# Value placeholders that name a file or a directory (``-m`` takes a checkpoint directory or a repository).
PATH_PLACEHOLDERS = frozenset({"FNAME", "FILE", "PATH", "JINJA_TEMPLATE_FILE", "FNAME:SCALE,..."})


def bash_completion(options: OptionTable | None = None) -> str:
    """The script ``mlxd-server --completion-bash`` prints; source it to complete mlxd-server's options."""
    options = options or table()
    words = " ".join(s for spec in options for s in spec.spellings)
    cases = [_case(spec.spellings, "compgen -f -- \"$cur\"") for spec in options
             if spec.takes_value and spec.placeholder in PATH_PLACEHOLDERS]
    cases += [_case(spec.spellings, f"compgen -W \"{' '.join(spec.choices)}\" -- \"$cur\"") for spec in options
              if spec.takes_value and spec.placeholder not in PATH_PLACEHOLDERS and spec.choices]
    lines = [
        f"{FUNCTION}() {{",
        "    local cur prev opts",
        "    COMPREPLY=()",
        '    cur="${COMP_WORDS[COMP_CWORD]}"',
        '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "",
        f'    opts="{words}"',
        "",
        '    case "$prev" in',
        *cases,
        "        *)",
        '            COMPREPLY=( $(compgen -W "${opts}" -- "$cur") )',
        "            return 0",
        "            ;;",
        "    esac",
        "}",
        "",
        *(f"complete -F {FUNCTION} {program}" for program in PROGRAMS),
    ]
    return "\n".join(lines) + "\n"


def _case(spellings: tuple[str, ...], generator: str) -> str:
    return (f"        {'|'.join(spellings)})\n"
            f"            COMPREPLY=( $({generator}) )\n"
            "            return 0\n"
            "            ;;")
