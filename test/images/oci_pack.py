#!/usr/bin/env python3
"""Packs files into a one-layer OCI image archive, without a container engine.

    oci_pack.py --ref gracekeeper.test/pause:lab --out pause.oci.tar \
        --file /path/to/pause:/pause:0755 --entrypoint '["/pause"]'

The archive is an OCI image layout in a tar (oci-layout, index.json,
blobs/sha256/...), the form `ctr images import` reads. The index entry carries
`io.containerd.image.name` (the full reference) and
`org.opencontainers.image.ref.name` (its tag), so containerd names the image
without --base-name. The output is byte-for-byte reproducible: every mtime is
0, every owner root, entries sorted, gzip without a name or time.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


def fail(msg):
    print(f"oci_pack: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_file(spec):
    """SRC:DEST[:MODE] -> (src, dest, mode)"""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        fail(f"--file {spec!r}: want SRC:/DEST[:MODE]")
    mode = None
    if len(parts) == 3:
        try:
            mode = int(parts[2], 8)
        except ValueError:
            fail(f"--file {spec!r}: mode {parts[2]!r} is not octal")
    if not os.path.isfile(parts[0]):
        fail(f"--file {spec!r}: {parts[0]} is not a file")
    return parts[0], parts[1], mode


def tar_info(name, kind, mode, size=0, linkname=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.linkname = linkname
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def build_layer(files, dirs, links):
    """Returns the uncompressed layer tar as bytes."""
    entries = {}  # path in image (no leading /) -> (TarInfo, data or None)

    def add_parents(path):
        parent = os.path.dirname(path)
        while parent and parent not in entries:
            entries[parent] = (tar_info(parent, tarfile.DIRTYPE, 0o755), None)
            parent = os.path.dirname(parent)

    for d, mode in dirs:
        path = d.strip("/")
        add_parents(path)
        entries[path] = (tar_info(path, tarfile.DIRTYPE, mode), None)
    for src, dest, mode in files:
        path = dest.strip("/")
        with open(src, "rb") as f:
            data = f.read()
        if mode is None:
            mode = 0o755 if os.access(src, os.X_OK) else 0o644
        add_parents(path)
        entries[path] = (tar_info(path, tarfile.REGTYPE, mode, len(data)), data)
    for dest, target in links:
        path = dest.strip("/")
        add_parents(path)
        entries[path] = (tar_info(path, tarfile.SYMTYPE, 0o777, 0, target), None)

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):
            info, data = entries[path]
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", required=True, help="full image reference, DOMAIN/NAME:TAG")
    ap.add_argument("--out", required=True, help="archive to write")
    ap.add_argument("--file", action="append", default=[], help="SRC:/DEST[:MODE]")
    ap.add_argument("--dir", action="append", default=[], help="/DEST[:MODE] (an empty directory)")
    ap.add_argument("--symlink", action="append", default=[], help="/DEST:TARGET")
    ap.add_argument("--entrypoint", default="null", help="JSON list")
    ap.add_argument("--cmd", default="null", help="JSON list")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE")
    ap.add_argument("--user", default="", help="UID[:GID]")
    ap.add_argument("--workdir", default="/")
    args = ap.parse_args()

    name, _, tag = args.ref.rpartition(":")
    if not name or "/" in tag or "." not in name.split("/")[0]:
        fail(f"--ref {args.ref!r}: want DOMAIN/NAME:TAG with a dot in DOMAIN")
    try:
        entrypoint = json.loads(args.entrypoint)
        cmd = json.loads(args.cmd)
    except json.JSONDecodeError as e:
        fail(f"--entrypoint/--cmd: not JSON: {e}")
    files = [parse_file(s) for s in args.file]
    dirs = []
    for spec in args.dir:
        d, _, mode = spec.partition(":")
        dirs.append((d, int(mode, 8) if mode else 0o755))
    links = []
    for spec in args.symlink:
        dest, sep, target = spec.partition(":")
        if not sep or not dest.startswith("/") or not target:
            fail(f"--symlink {spec!r}: want /DEST:TARGET")
        links.append((dest, target))

    layer = build_layer(files, dirs, links)
    gz = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0, compresslevel=9) as z:
        z.write(layer)
    layer_gz = gz.getvalue()

    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": args.env,
            "Entrypoint": entrypoint,
            "Cmd": cmd,
            "WorkingDir": args.workdir,
            **({"User": args.user} if args.user else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": [sha(layer)]},
        "history": [{"created_by": "gracekeeper test/images/oci_pack.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": sha(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": sha(layer_gz), "size": len(layer_gz)}],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            "mediaType": MEDIA_MANIFEST,
            "digest": sha(manifest_bytes),
            "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": args.ref,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }
    index_bytes = json.dumps(index, sort_keys=True, separators=(",", ":")).encode()

    tmp = args.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def put(path, data):
            tar.addfile(tar_info(path, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
        tar.addfile(tar_info("blobs", tarfile.DIRTYPE, 0o755))
        tar.addfile(tar_info("blobs/sha256", tarfile.DIRTYPE, 0o755))
        for blob in sorted([config_bytes, manifest_bytes, layer_gz], key=sha):
            put("blobs/sha256/" + sha(blob)[len("sha256:"):], blob)
        put("index.json", index_bytes)
        put("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    os.replace(tmp, args.out)
    print(f"{args.ref} {sha(manifest_bytes)} layer {len(layer_gz)} bytes -> {args.out}")


if __name__ == "__main__":
    main()
