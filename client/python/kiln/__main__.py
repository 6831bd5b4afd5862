"""`python -m kiln status [--socket PATH] [--json]`: what the node's kilnd says to this
process, for a quick check inside a serving container: the socket reached, this process's
roles, the node fields, whether the node can build (and why not), and this process's torch
against kiln.torch's supported range. Exit status 0 when kilnd answered, 1 when not.

`python -m kiln manifest PATH [--socket PATH] [--region CLASS]`: the prewarm manifest of
everything the node holds for kiln.torch users (every stored key built from a source
kiln.torch registered), with those sources beside it, for `kilnctl prewarm` on another node
(schema/prewarm-manifest.md). From inside a process, kiln.torch.manifest(model, path)
writes the keys that model asked for. Exit status 0 when written, 1 when not.
"""
import argparse
import json
import os
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


def manifest(path, socket=None, region=None, out=sys.stdout):
    from . import Client, KilnError
    from . import _manifest

    try:
        with Client(socket) as c:
            n = _manifest.from_node(c, path, region)
    except KilnError as e:
        print(f"kilnd: {e}", file=out)
        return 1
    if not n["keys"]:
        print(f"{path}: the node holds no artifact built from a kiln.torch source"
              + (f" of region {region}" if region else ""), file=out)
        return 1
    print(f"{path}: {n['keys']} key(s), {n['sources']} source(s) under {os.path.dirname(os.path.abspath(path))}"
          "/sources; `kilnctl prewarm` it on the target node", file=out)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m kiln", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="what the node's kilnd says to this process")
    st.add_argument("--socket", help="kilnd's socket (default: $KILN_SOCKET, then the default search)")
    st.add_argument("--json", action="store_true", help="kilnd's STATUS reply as JSON")
    mf = sub.add_parser("manifest", help="a prewarm manifest of what the node built for kiln.torch users")
    mf.add_argument("path", help="the manifest to write (its sources go to sources/ beside it)")
    mf.add_argument("--socket", help="kilnd's socket (default: $KILN_SOCKET, then the default search)")
    mf.add_argument("--region", help="only this block class")
    a = ap.parse_args(argv)
    if a.command == "manifest":
        return manifest(a.path, a.socket, a.region)
    return status(a.socket, a.json)


if __name__ == "__main__":
    sys.exit(main())
