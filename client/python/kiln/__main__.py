"""`python -m kiln status [--socket PATH] [--json]`: what the node's kilnd says to this
process, for a quick check inside a serving container: the socket reached, this process's
roles, the node fields, whether the node can build (and why not), and this process's torch
against kiln.torch's supported range. Exit status 0 when kilnd answered, 1 when not.
"""
import argparse
import json
import sys


def _torch_line():
    try:
        import torch
    except ImportError:
        return "torch: not installed (kiln.Client works; kiln.torch needs torch)"
    from .torch import check_torch

    try:
        check_torch()
        return f"torch: {torch.__version__} (supported by kiln.torch)"
    except RuntimeError as e:
        return f"torch: {torch.__version__} (not supported by kiln.torch: {e})"


def status(socket=None, as_json=False, out=sys.stdout):
    from . import Client, KilnError

    try:
        with Client(socket) as c:
            st = c.status()
    except KilnError as e:
        print(f"kilnd: not reached: {e}", file=out)
        return 1
    if as_json:
        print(json.dumps(st, indent=1, sort_keys=True), file=out)
        return 0
    builds = st.get("builds_unavailable")
    can_build = "no: " + builds if builds else ("probing" if st.get("builds_probing") else "yes")
    node = st.get("node") or {}
    print(f"kilnd: {st.get('server', '?')} on {st.get('socket', socket or '?')}", file=out)
    print(f"roles: {', '.join(st.get('roles') or []) or 'none'}", file=out)
    print("node: " + ", ".join(f"{k}={v}" for k, v in sorted(node.items())), file=out)
    print(f"can build: {can_build}", file=out)
    print(_torch_line(), file=out)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m kiln", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="what the node's kilnd says to this process")
    st.add_argument("--socket", help="kilnd's socket (default: $KILN_SOCKET, then the default search)")
    st.add_argument("--json", action="store_true", help="kilnd's STATUS reply as JSON")
    a = ap.parse_args(argv)
    return status(a.socket, a.json)


if __name__ == "__main__":
    sys.exit(main())
