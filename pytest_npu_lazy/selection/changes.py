"""What a change touches: files, and the lines of their old side, from git, a diff or a file list.

``--npu-lazy-changed`` (and the selection command's ``--changed``) take, in this order:

- ``-``: a unified diff on standard input (``git diff | pytest ... --npu-lazy-changed=-``);
- ``@FILE``: a list of changed files, one per line (what a CI system often has);
- a ``.diff`` or ``.patch`` file;
- a git range ``A..B`` or ``A...B`` (the latter from their merge base, as a pull request sees it);
- a git revision: that revision against the working tree;
- a comma-separated list of changed files.

Lines are those of the *old* side, the sources the map was taken on: a removed or rewritten line
is touched; an added line touches its old neighbours (it lands between them, in their scope).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .sources import SelectionError

SPEC_HELP = ("a git range (main..HEAD, or origin/master...HEAD as a pull request sees it), a revision (HEAD~1: "
             "it against the working tree), a diff file (.diff/.patch), - for a diff on stdin, @FILE for a list "
             "of changed files, or changed files separated by commas")


@dataclass(frozen=True)
class FileChange:
    path: str
    #: "modified", "added", "deleted" or "listed" (a file list says nothing of lines)
    status: str
    #: old-side lines touched; None: the whole file
    lines: frozenset[int] | None = None
    #: the old side's blob id from the diff's index line (maybe abbreviated); None where the diff has none
    blob: str | None = None


@dataclass(frozen=True)
class ChangeSet:
    #: the argument as given, and what it was read as
    spec: str
    source: str
    files: tuple[FileChange, ...]
    #: the directory the paths are relative to (a git top level, or where the command ran)
    base: Path

    def to_dict(self) -> dict:
        return {"spec": self.spec, "source": self.source, "base": str(self.base),
                "files": [{"path": f.path, "status": f.status, "blob": f.blob,
                           "lines": None if f.lines is None else sorted(f.lines)} for f in self.files]}

    def rootdir_within(self, rootdir: Path) -> str:
        """Where pytest's rootdir (node ids are relative to it) lies below :attr:`base`, posix; "" for the same
        directory or one outside it."""
        try:
            inside = rootdir.resolve().relative_to(self.base.resolve()).as_posix()
        except ValueError:
            return ""
        return "" if inside == "." else inside

    @classmethod
    def from_dict(cls, data: dict) -> "ChangeSet":
        return cls(data["spec"], data["source"], tuple(
            FileChange(f["path"], f["status"], None if f["lines"] is None else frozenset(f["lines"]), f["blob"])
            for f in data["files"]), Path(data["base"]))


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_diff(text: str) -> list[FileChange]:
    """The files of a unified diff (git's or ``diff -u``'s) with the old-side lines each touches."""
    changes: list[FileChange] = []
    current: dict | None = None
    old_line = old_left = new_left = 0
    last_kind = ""

    def close() -> None:
        if current is not None and current["path"]:
            whole = current["status"] in ("added", "deleted") or current["binary"]
            changes.append(FileChange(current["path"], current["status"],
                                      None if whole else frozenset(current["lines"]), current["blob"]))

    def start(path: str = "") -> dict:
        close()
        return {"path": path, "status": "modified", "lines": set(), "blob": None, "binary": False, "headers": False}

    lines = text.splitlines()
    for index, line in enumerate(lines):
        # inside a hunk: its counts say where it ends, whatever a line looks like (a hunk needs a file: current)
        if current is not None and (old_left > 0 or new_left > 0):
            if line.startswith("\\"):  # "\ No newline at end of file"
                continue
            kind = line[:1] or " "
            if kind == "-":
                current["lines"].add(old_line)
                old_line, old_left, last_kind = old_line + 1, old_left - 1, "-"
            elif kind == "+":
                if last_kind not in ("-", "+r"):  # an insertion, not the new text of removed lines
                    current["lines"].update(n for n in (old_line - 1, old_line) if n >= 1)
                    last_kind = "+"
                else:
                    last_kind = "+r"
                new_left -= 1
            else:
                old_line, old_left, new_left, last_kind = old_line + 1, old_left - 1, new_left - 1, " "
            continue
        if line.startswith("diff --git "):
            current = start(_strip(line[len("diff --git "):].split(" b/")[-1], "b/"))
        elif line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            old, new = (part[4:].split("\t")[0].strip() for part in (line, lines[index + 1]))
            if current is None or current["headers"]:
                current = start()
            current["headers"] = True
            if old == "/dev/null":
                current["status"], current["path"] = "added", _strip(new, "b/")
            elif new == "/dev/null":
                current["status"], current["path"] = "deleted", _strip(old, "a/")
            else:
                current["path"] = _strip(old, "a/")
        elif current is None:
            continue
        elif line.startswith("new file mode"):
            current["status"] = "added"
        elif line.startswith("deleted file mode"):
            current["status"] = "deleted"
        elif line.startswith("index ") and current["blob"] is None:
            current["blob"] = line.split()[1].split("..")[0]
        elif line.startswith(("Binary files", "GIT binary patch")):
            current["binary"] = True
        elif (match := _HUNK.match(line)) is not None:
            old_start, old_left = int(match.group(1)), int(match.group(2) or 1)
            new_left = int(match.group(4) or 1)
            old_line = old_start + 1 if old_left == 0 else old_start
            last_kind = ""
    close()
    return changes


def _strip(path: str, prefix: str) -> str:
    path = path.strip('"')
    return path[len(prefix):] if path.startswith(prefix) else path


def _git(base: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(base), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise SelectionError("git is not installed here: give the change as a diff file, - for a diff on stdin, or a "
                             "list of changed files.") from None


def git_top(directory: Path) -> Path | None:
    result = _git(directory, "rev-parse", "--show-toplevel")
    return Path(result.stdout.strip()) if result.returncode == 0 else None


def resolve(spec: str, directory: Path, read_stdin: Callable[[], str]) -> ChangeSet:
    """Read ``spec`` as the module docstring lists; the paths are relative to the git top level of ``directory``
    where there is one."""
    spec = spec.strip()
    if not spec:
        raise SelectionError(f"--npu-lazy-changed is empty: give {SPEC_HELP}.")
    top = git_top(directory) if spec != "-" else None
    base = top or directory
    if spec == "-":
        text = read_stdin()
        if not text.strip():
            raise SelectionError("--npu-lazy-changed=- read an empty diff from stdin: pipe one in (git diff main... | "
                                 "pytest ...), or give the change another way.")
        return _from_diff(spec, "a diff on stdin", text, git_top(directory) or directory)
    if spec.startswith("@"):
        listed = Path(spec[1:])
        try:
            names = [n.strip() for n in listed.read_text().splitlines() if n.strip() and not n.startswith("#")]
        except OSError as exc:
            raise SelectionError(f"--npu-lazy-changed={spec}: cannot read the file list {listed} ({exc.strerror}).") from None
        return ChangeSet(spec, f"{len(names)} files listed in {listed}", tuple(FileChange(n, "listed") for n in names),
                         base)
    if spec.endswith((".diff", ".patch")) and Path(spec).is_file():
        return _from_diff(spec, f"the diff {spec}", Path(spec).read_text(errors="replace"), base)
    if ".." in spec or (top is not None and "," not in spec and _is_revision(top, spec)):
        if top is None:
            raise SelectionError(f"--npu-lazy-changed={spec} names a git range, but {directory} is not in a git "
                                 "repository: run from the repository's checkout, or give a diff or a file list.")
        revisions = re.split(r"\.\.\.?", spec)
        for revision in revisions:
            if revision and not _is_revision(top, revision):
                raise SelectionError(f"--npu-lazy-changed={spec}: {revision!r} is not a revision of the repository "
                                     f"at {top} (fetch it, e.g. git fetch origin {revision}, or check its spelling).")
        result = _git(top, "diff", "--no-color", "--no-ext-diff", "--no-renames", "--full-index", "-U0", spec)
        if result.returncode != 0:
            raise SelectionError(f"--npu-lazy-changed={spec}: git diff failed: {result.stderr.strip()}")
        source = f"git diff {spec}" + ("" if ".." in spec else " (against the working tree)")
        return _from_diff(spec, source, result.stdout, top, allow_empty=True)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not all("/" in n or "." in n or (base / n).exists() for n in names):
        bad = next(n for n in names if not ("/" in n or "." in n or (base / n).exists()))
        if top is None:
            raise SelectionError(f"--npu-lazy-changed={spec}: {bad!r} is not a file here, and {base} is not in a git "
                                 "repository, so it cannot name a revision: run from the repository's checkout, or "
                                 f"give {SPEC_HELP}.")
        raise SelectionError(f"--npu-lazy-changed={spec}: {bad!r} is neither a git revision here nor a file; give "
                             f"{SPEC_HELP}.")
    return ChangeSet(spec, f"{len(names)} listed files", tuple(FileChange(n, "listed") for n in names), base)


def _is_revision(top: Path, revision: str) -> bool:
    return _git(top, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").returncode == 0


def _from_diff(spec: str, source: str, text: str, base: Path, allow_empty: bool = False) -> ChangeSet:
    files = parse_diff(text)
    if not files and not allow_empty:
        raise SelectionError(f"--npu-lazy-changed={spec}: {source} holds no file change (is it a unified diff?).")
    return ChangeSet(spec, source, tuple(files), base)
