"""Where a pull's files come from: the plan of files (URL, name, sha256, size) for a name, and
the small layers that go with them.

    Hugging Face Hub  GET {HF_ENDPOINT}/api/models/ORG/REPO/revision/main?blobs=true lists the
                      files with their LFS sha256; the GGUF of the asked quantisation (all its
                      parts, where it is split) is fetched by its `resolve` URL at that commit,
                      whose HEAD says X-Repo-Commit, X-Linked-Etag and X-Linked-Size.
    Ollama registry   GET /v2/NAMESPACE/MODEL/manifests/TAG, then each layer as a blob by its
                      digest: the model layer is the GGUF; template, params, system and licence
                      layers are kept beside it.
    Plain URL         the file itself; its sha256 is checked where the pull gives one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..protocol.errors import ErrorKind, InferError
from .download import RemoteFile, raise_for_source
from .names import ModelName

HF_DEFAULT_ENDPOINT = "https://huggingface.co"
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
OLLAMA_LAYER = "application/vnd.ollama.image."
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_QUANT = re.compile(r"(?i)(?:^|[-._])((?:I?Q\d(?:_[A-Z0-9]+)*)|F16|BF16|F32|MXFP4)(?=[-._]|$)")


@dataclass
class Plan:
    """What a pull fetches: the model's files (the first is the one to load) and the small
    layers kept beside them (the registry's template, params, system prompt and licence)."""

    files: list[RemoteFile]
    origin: str
    layers: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)


def plan(client: httpx.Client, name: ModelName, *, insecure: bool = False,
         sha256: str | None = None) -> Plan:  # fmt: skip
    try:
        if name.source == "hf":
            return _hub_plan(client, name)
        if name.source == "ollama":
            return _registry_plan(client, name, insecure=insecure)
        return _url_plan(client, name, sha256)
    except httpx.TransportError as err:
        where = httpx.URL(_endpoint() if name.source == "hf" else name.url or f"//{name.host}")
        raise InferError(
            ErrorKind.CONNECT_FAILED, f"cannot reach {where.host or name.host}: {err}"
        ) from None


# -- the Hugging Face Hub --------------------------------------------------------------


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", HF_DEFAULT_ENDPOINT).rstrip("/")


def hub_headers() -> dict[str, str]:
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _hub_plan(client: httpx.Client, name: ModelName) -> Plan:
    base, repo = _endpoint(), name.repo
    info = client.get(
        f"{base}/api/models/{repo}/revision/main", params={"blobs": "true"},
        headers=hub_headers(), follow_redirects=True,  # a renamed repository
    )  # fmt: skip
    if info.status_code in (401, 403, 404):
        code = info.headers.get("X-Error-Code", "")
        if code == "GatedRepo":
            raise InferError(
                ErrorKind.UNAUTHORIZED,
                f"hf.co/{repo} is gated: accept its terms on the Hub, then set HF_TOKEN"
                + (" (this token has no access yet)" if hub_headers() else ""),
            )
        raise InferError(
            ErrorKind.MODEL_NOT_FOUND,
            f"hf.co/{repo} is not on the Hub"
            + ("" if hub_headers() else " (or it is private: set HF_TOKEN)"),
        )
    raise_for_source(info.status_code, info.headers, f"hf.co/{repo}")
    body = _json(info, f"hf.co/{repo}")
    commit = body.get("sha") or "main"
    ggufs = {
        s["rfilename"]: s
        for s in body.get("siblings", [])
        if s["rfilename"].lower().endswith(".gguf") and "mmproj" not in s["rfilename"].lower()
    }
    chosen = sorted(f for f in ggufs if quant_of(f) == name.tag.upper())
    if not chosen:
        have = sorted({q for f in ggufs if (q := quant_of(f))})
        raise InferError(
            ErrorKind.MODEL_NOT_FOUND,
            f"hf.co/{repo} has no {name.tag} GGUF"
            + (f"; it has {', '.join(have)}" if have else "; it has no GGUF at all"),
        )
    first = chosen[0]
    if split := _SPLIT.search(first):  # every part of that one file, in order
        prefix = first[: split.start()]
        chosen = sorted(f for f in chosen if f.startswith(prefix) and _SPLIT.search(f))
        if len(chosen) != int(split.group(2)):
            raise InferError(
                ErrorKind.MODEL_NOT_FOUND, f"hf.co/{repo}: {first} misses some of its parts"
            )
    else:
        chosen = [first]
    files = []
    for path in chosen:
        url = f"{base}/{repo}/resolve/{commit}/{path}"
        head = client.head(url, headers=hub_headers(), follow_redirects=False)
        raise_for_source(head.status_code, head.headers, path)
        lfs = ggufs[path].get("lfs") or {}
        linked = head.headers.get("X-Linked-Etag", "").strip('"')
        sha = lfs.get("sha256") or (linked if len(linked) == 64 else None)
        if lfs.get("sha256") and linked and linked != lfs["sha256"]:
            raise InferError(ErrorKind.DIGEST_MISMATCH, f"{path}: the Hub gives two sha256s for it")
        size = lfs.get("size") or ggufs[path].get("size") or head.headers.get("X-Linked-Size")
        name_here, length = path.rsplit("/", 1)[-1], int(size) if size else None
        files.append(RemoteFile(url, name_here, sha, length, headers=hub_headers()))
    return Plan(files, origin=f"{base}/{repo}@{head.headers.get('X-Repo-Commit', commit)}")


def quant_of(filename: str) -> str | None:
    """The quantisation a GGUF's file name says (`…-Q4_K_M.gguf`, `….IQ3_XS-00001-of-…`)."""
    stem = _SPLIT.sub("", filename.rsplit("/", 1)[-1])
    stem = re.sub(r"(?i)\.gguf$", "", stem)
    found = _QUANT.findall(stem)
    return found[-1].upper() if found else None


# -- Ollama's registry -----------------------------------------------------------------


def _registry_plan(client: httpx.Client, name: ModelName, *, insecure: bool) -> Plan:
    base = f"{'http' if insecure else 'https'}://{name.host}/v2/{name.namespace}/{name.model}"
    reply = client.get(f"{base}/manifests/{name.tag}", headers={"Accept": MANIFEST_TYPE})
    if reply.status_code == 404:
        raise InferError(
            ErrorKind.MODEL_NOT_FOUND, f"{name.short} is not in the registry at {name.host}"
        )
    raise_for_source(reply.status_code, reply.headers, name.short)
    manifest = _json(reply, name.short)
    files: list[RemoteFile] = []
    layers: dict[str, Any] = {}
    for layer in manifest.get("layers", []):
        kind = str(layer.get("mediaType", "")).removeprefix(OLLAMA_LAYER)
        digest = str(layer.get("digest", ""))
        if not digest.startswith("sha256:"):
            continue
        url = f"{base}/blobs/{digest}"
        if kind == "model":
            files.append(RemoteFile(url, "model.gguf", digest[7:], layer.get("size")))
        elif kind in ("template", "system", "license", "params"):
            layers[kind] = _small_layer(client, url, digest, kind)
    if not files:
        raise InferError(ErrorKind.MODEL_INVALID, f"{name.short} has no model layer")
    return Plan(files, origin=f"{base}/manifests/{name.tag}", layers=layers)


def _small_layer(client: httpx.Client, url: str, digest: str, kind: str) -> Any:
    reply = client.get(url, follow_redirects=True)
    raise_for_source(reply.status_code, reply.headers, f"the {kind} layer")
    if hashlib.sha256(reply.content).hexdigest() != digest[7:]:
        raise InferError(ErrorKind.DIGEST_MISMATCH, f"the {kind} layer is not {digest}")
    text = reply.content.decode("utf-8", errors="replace")
    return json.loads(text) if kind == "params" else text


# -- a plain URL -----------------------------------------------------------------------


def _url_plan(client: httpx.Client, name: ModelName, sha256: str | None) -> Plan:
    assert name.url is not None
    head = client.head(name.url, follow_redirects=True, headers={"Accept-Encoding": "identity"})
    if head.status_code >= 400 and head.status_code != 404:  # no HEAD (S3's signed URLs)
        size = None  # the GET tells
    else:
        raise_for_source(head.status_code, head.headers, name.url)
        length = head.headers.get("Content-Length")
        size = int(length) if length and length.isdigit() else None
    file = RemoteFile(name.url, f"{name.model}.gguf", sha256.lower() if sha256 else None, size)
    return Plan([file], origin=name.url)


def _json(reply: httpx.Response, what: str) -> Any:
    try:
        return reply.json()
    except ValueError:
        raise InferError(
            ErrorKind.MODEL_INVALID, f"{what}: the source's answer is not JSON"
        ) from None
