"""A script trial's working directory: an overlay of the user's directory made of links, and the guard that keeps
the trial's Python-level writes inside its scratch directory (docs/tune.md, "A script of your own").

The overlay: the trial's working directory holds a link to each entry of the user's working directory, so the
script's relative reads (and the C-level reads of its libraries) find the user's files through the kernel. The
guard: an audit hook (sys.addaudithook, installed before the script runs) sees every Python-level open for
writing, mkdir, remove, rename, truncate, link, chmod and utime. A path that leads into the user's files through
a link is copied up first, as an overlay file system does: a linked directory on the way becomes a scratch
directory of links to its entries, a linked file to be modified becomes a scratch copy, one to be truncated or
removed just loses its link. A path outside the trial's directory (an absolute path into the user's files, say) is
refused with a PermissionError naming it. Limits (documented in docs/tune.md): writes that Python does not audit
(C code opening files itself, child processes started with exec or spawn) are not seen.
"""
import os
import shutil
import sys

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
ALLOWED_OUTSIDE = ("/dev",)  # /dev/null, terminals


def _under(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def link_entries(source, target, skip=()):
    """Makes `target` a directory holding a link to each entry of `source` (those whose real path is not under one
    of `skip`: the scratch directory itself when it lies inside the user's directory)."""
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(source):
        entry = os.path.join(source, name)
        if any(_under(os.path.realpath(entry), s) for s in skip):
            continue
        os.symlink(entry, os.path.join(target, name))


class ScratchGuard:
    """Keeps Python-level writes under `root` (the trial's directory), copying up what is reached through links."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.refused = []  # the paths refused (for the trial's results)
        self._busy = False  # copying up: the hook's own calls pass

    def install(self):
        sys.addaudithook(self._hook)
        return self

    # event name -> (the positions of its path arguments and their intent, the position of its dir_fd or None)
    EVENTS = {
        "os.mkdir": (((0, "create"),), 2),
        "os.remove": (((0, "remove"),), 1),
        "os.rmdir": (((0, "remove"),), 1),
        "os.rename": (((0, "remove"), (1, "create")), 2),
        "os.truncate": (((0, "modify"),), None),
        "os.symlink": (((1, "create"),), 2),
        "os.link": (((1, "create"),), 3),
        "os.chmod": (((0, "modify"),), 2),
        "os.chown": (((0, "modify"),), 3),
        "os.utime": (((0, "modify"),), 3),
    }

    def _hook(self, event, args):
        if self._busy:
            return
        if event == "open":
            path, mode, flags = args
            if isinstance(mode, str):
                writes = any(c in mode for c in "wax+")
                truncates = "w" in mode
            else:
                writes = bool((flags or 0) & _WRITE_FLAGS)
                truncates = bool((flags or 0) & os.O_TRUNC)
            if writes:
                self.prepare(path, None, "truncate" if truncates else "modify")
            return
        spec = self.EVENTS.get(event)
        if spec is None:
            return
        paths, dir_fd_at = spec
        dir_fd = args[dir_fd_at] if dir_fd_at is not None and dir_fd_at < len(args) else None
        for position, intent in paths:
            self.prepare(args[position], dir_fd, intent)

    def _lexical(self, path, dir_fd):
        base = os.getcwd()
        if isinstance(dir_fd, int) and dir_fd >= 0:
            base = os.readlink(f"/proc/self/fd/{dir_fd}")
        return os.path.normpath(os.path.join(base, os.fsdecode(path)))

    def prepare(self, path, dir_fd, intent):
        """Before a write to `path` ("create", "truncate", "modify", "remove"): copies up what it reaches through
        links into the user's files; refuses a path outside the trial's directory."""
        if path is None or isinstance(path, int):  # a file descriptor: its open was seen
            return
        where = self._lexical(path, dir_fd)
        if any(_under(where, a) for a in ALLOWED_OUTSIDE):
            return
        if not _under(where, self.root):
            if _under(os.path.realpath(where), self.root):
                return
            self.refused.append(where)
            raise PermissionError(f"[dygrad.tune] a trial writes only inside its scratch directory {self.root}: "
                                  f"refused to write {where} (give the script a relative output path, or run it "
                                  "without the tuner; docs/tune.md)")
        self._busy = True
        try:
            self._copy_up(where, intent)
        finally:
            self._busy = False

    def _linked_out(self, path):
        return os.path.islink(path) and not _under(os.path.realpath(path), self.root)

    def _copy_up(self, where, intent):
        parts = os.path.relpath(where, self.root).split(os.sep)
        current = self.root
        for name in parts[:-1]:
            current = os.path.join(current, name)
            if self._linked_out(current):
                target = os.path.realpath(current)
                if not os.path.isdir(target):
                    return  # a path through a file: the call fails by itself
                os.unlink(current)
                link_entries(target, current)
        final = os.path.join(current, parts[-1])
        if not self._linked_out(final) or intent in ("remove", "create"):
            return  # inside the scratch directory; removing or replacing the link itself; creating fails by itself
        target = os.path.realpath(final)
        if os.path.isdir(target):
            if intent == "modify":  # chmod or utime of a linked directory: a scratch directory of links
                os.unlink(final)
                link_entries(target, final)
            return  # opening a directory for writing fails by itself
        os.unlink(final)  # modified: a scratch copy first; truncated: an empty scratch file (with its mode)
        if not os.path.exists(target):
            return
        if intent == "modify":
            shutil.copy2(target, final)
        else:
            open(final, "wb").close()
            shutil.copymode(target, final)
