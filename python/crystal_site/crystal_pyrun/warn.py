"""The one way crystal_pyrun reports a problem: one line on stderr, never an exception."""
import sys

_said = set()


def once(what, err=None):
    if what in _said:
        return
    _said.add(what)
    try:
        detail = "" if err is None else ": %s: %s" % (type(err).__name__, err)
        sys.stderr.write("crystal: warning: %s%s\n" % (what, detail))
    except Exception:
        pass
