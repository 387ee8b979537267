"""What `infertui pull NAME` accepts, and the name a model is then served by.

    hf.co/ORG/REPO[:QUANT]              a GGUF repository on the Hugging Face Hub (default
                                        quantisation Q4_K_M, as Ollama's)
    [HOST[:PORT]/][NAMESPACE/]NAME[:TAG]  Ollama's registry (registry.ollama.ai, library,
                                        latest), e.g. llama3.2:1b
    https://…/FILE.gguf                 a plain file, served as FILE:latest
    peer:<server-id>/NAME               another infertui host's model, over Hyperswarm, served
                                        as NAME (transport/p2p/peer_pull.py fetches it)

Every name has one full form, `host/namespace/model:tag`, that the library files it under;
`short` is how Ollama shows it (its defaults left out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

from ..protocol.errors import ErrorKind, InferError

OLLAMA_HOST = "registry.ollama.ai"
HF_HOST = "hf.co"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
DEFAULT_QUANT = "Q4_K_M"

Source = Literal["ollama", "hf", "url"]

_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")


@dataclass(frozen=True)
class ModelName:
    """A model's name, and where a pull fetches it from (`url` for a plain file)."""

    source: Source
    host: str
    namespace: str
    model: str
    tag: str
    url: str | None = None

    @property
    def full(self) -> str:
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def short(self) -> str:
        """As Ollama lists it: `llama3.2:1b`, `me/mine:latest`, `hf.co/org/repo:Q4_K_M`."""
        if self.host == OLLAMA_HOST and self.namespace == DEFAULT_NAMESPACE:
            return f"{self.model}:{self.tag}"
        if self.host == OLLAMA_HOST:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return self.full

    @property
    def repo(self) -> str:
        """The Hub's `ORG/REPO`."""
        return f"{self.namespace}/{self.model}"

    def with_tag(self, tag: str) -> ModelName:
        return ModelName(self.source, self.host, self.namespace, self.model, tag, self.url)


PEER = "peer:"


def same_model(a: str, b: str) -> bool:
    """Whether two names a client may give name one model, as Ollama takes them: case aside,
    and `:latest` the same as no tag."""
    return a.casefold().removesuffix(":latest") == b.casefold().removesuffix(":latest")


def split_peer(text: str) -> tuple[str, str] | None:
    """`peer:<server-id>/<name>` (a model of another infertui host's library) as (server ID,
    name); None for any other name."""
    if not text.startswith(PEER):
        return None
    server_id, slash, name = text.removeprefix(PEER).partition("/")
    if not slash or not server_id or not name:
        raise _bad(text, "a peer's model is peer:<server-id>/<name>")
    return server_id, name


def parse_name(text: str) -> ModelName:
    """A pull's NAME (or a library model's, in any of its forms) as a ModelName; a malformed
    one is INVALID_PARAMS, with what was wrong."""
    text = text.strip()
    if text.startswith(("http://", "https://")):
        return _from_url(text)
    rest, tag = _split_tag(text)
    parts = rest.split("/")
    if parts[0].lower() in (HF_HOST, "huggingface.co") and len(parts) == 3:
        _check(parts[1:], tag, text)
        quant = DEFAULT_QUANT if tag in (None, DEFAULT_TAG) else tag.upper()
        return ModelName("hf", HF_HOST, parts[1], parts[2], quant)
    if len(parts) == 3:
        host, namespace, model = parts
    elif len(parts) == 2:
        host, (namespace, model) = OLLAMA_HOST, parts
    elif len(parts) == 1:
        host, namespace, model = OLLAMA_HOST, DEFAULT_NAMESPACE, parts[0]
    else:
        raise _bad(text, "a name has at most three parts: HOST/NAMESPACE/MODEL")
    if not _HOST.match(host) or ".." in host:
        raise _bad(text, f"'{host}' is not a host name")
    _check([namespace, model], tag, text)
    return ModelName("ollama", host.lower(), namespace.lower(), model.lower(), tag or DEFAULT_TAG)


def _split_tag(text: str) -> tuple[str, str | None]:
    """`NAME:TAG` apart, where the colon is the last part's (a HOST:PORT's is not a tag)."""
    head, slash, last = text.rpartition("/")
    name, colon, tag = last.partition(":")
    return head + slash + name, (tag if colon else None)


def _check(parts: list[str], tag: str | None, text: str) -> None:
    for part in parts:
        if not _PART.match(part) or ".." in part:  # never a way out of the library's folder
            raise _bad(text, f"'{part}' has characters a model name cannot have")
    if tag is not None and not _PART.match(tag):
        raise _bad(text, f"'{tag}' is not a tag")


def _from_url(text: str) -> ModelName:
    where = urlsplit(text)
    file = unquote(where.path.rsplit("/", 1)[-1])
    if not where.hostname or not file.lower().endswith(".gguf"):
        raise _bad(text, "a URL pull names a .gguf file")
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", file[: -len(".gguf")]).lstrip("._-").lower()
    if not stem:
        raise _bad(text, "the file's name leaves no model name")
    return ModelName("url", OLLAMA_HOST, DEFAULT_NAMESPACE, stem[:128], DEFAULT_TAG, url=text)


def _bad(text: str, why: str) -> InferError:
    return InferError(ErrorKind.INVALID_PARAMS, f"'{text}' is not a model name: {why}")
