"""The one redaction policy for everything bisect-lab stores or prints (layer 1, pure).

Two jobs:

* **Sinks** (the database, ``--json``, reports, ``diff``, stderr, the cache's JSON files) pass
  their text through :func:`redact_text` / :func:`redact_tree`: env vars whose names look secret
  (:func:`is_secret_name`) lose their values, so do secret-looking command-line flags, well-known
  token shapes, credentials in URLs, ``Authorization`` headers and every secret value this process
  was told about (:func:`remember`).
* **Identity**: an arm that sets a secret (``all HF_TOKEN=hf_...``) is stored and shown as
  ``all HF_TOKEN=<redacted:3f2a1b9c>``: a keyed hash (HMAC-SHA256, 8 hex digits) stands for the
  value, so two tokens stay two arms and a resume matches the stored trials. The key is the results
  folder's (:func:`use_key`, kept outside the database): without it the tag says nothing about the
  value, so a short password cannot be guessed from a shared database or report. The real value
  stays in memory (``Arm.env``) and reaches the benchmark; a tag this process made maps back to it
  (:func:`untag`), so a stored spec can be handed on within one run (a sweep's bisection).

Pure: no I/O (the key's file lives with the store).
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets as _secrets
import threading
from typing import Any, Callable, Mapping

__all__ = ["REDACTED", "is_secret_name", "redact_text", "redact_env", "redact_tree", "use_key", "tag",
           "needs_tag", "is_tag", "untag", "remember"]

REDACTED = "<redacted>"
_TAG_RE = re.compile(r"<redacted(?::[0-9a-f]{8})?>")
# A value that is already a redaction stays as it is (idempotent); so does a tag as a pytest id shows it.
_SKIP = r"(?!<redacted|redacted-[0-9a-f]{8}\b)"

# --------------------------------------------------------------------------- secret names
# Matched against the words of a name (split at _ - . and camelCase), not as substrings, so that
# tuning knobs that merely contain the letters stay visible: NCCL_IB_PKEY, MAX_TOKENS,
# TOKENIZERS_PARALLELISM, MONKEY_PATCH, AUTHOR. KEY as a word is secret (API_KEY, SSH_KEY, KEY):
# a knob named *_KEY loses readability, never its identity (values are hashed, not merged).
_SECRET_WORDS = frozenset({
    "TOKEN", "KEY", "APIKEY", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "PASS", "PASSPHRASE",
    "PWD", "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "AUTHORIZATION", "COOKIE", "COOKIES"})
# Compound words: HFTOKEN, CLIENTSECRET, DBPASSWORD, OPENAIAPIKEY.
_SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY")
# Names that hold no secret although a word matches.
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    """True for env var, flag or field names that hold secrets (``HF_TOKEN``, ``api_key``,
    ``--hf-token``, ``MY_PASSWORD``, ``AWS_SECRET_ACCESS_KEY``, ``apiKey``)."""
    if not isinstance(name, str) or name.upper().lstrip("-") in _NOT_SECRET:
        return False
    for w in _WORD_SPLIT.split(name):
        w = w.upper()
        if w in _SECRET_WORDS or (len(w) > 5 and w.endswith(_SECRET_SUFFIXES)):
            return True
    return False


# --------------------------------------------------------------------------- secret text
_SECRET_VALUES = [
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),                                  # Hugging Face
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),  # GitHub
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"),                            # GitLab
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),                               # OpenAI / Anthropic style
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),                          # AWS access key id
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),                        # Slack
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),                               # Google API key
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),  # JWT
]
# Basic needs a digit, + / or = in its token: "basic benchmark" is prose, "Basic dXNlcjpwdzE=" is not.
_BEARER = re.compile(r"\b([Bb]earer|BEARER)\s+" + _SKIP + r"[A-Za-z0-9._~+/=\-]{8,}"
                     r"|\b(Basic)\s+" + _SKIP + r"(?=[A-Za-z]*[0-9+/=])[A-Za-z0-9+/]{8,}={0,2}")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^/\s:@]*):" + _SKIP + r"([^@\s/]+)@")
_VALUE = r"""("[^"\n]*"|'[^'\n]*'|[^\s'",;]+)"""
# NAME=value (shell, env dumps, logs); "name": "value" and 'name': 'value' (JSON, Python reprs);
# NAME: value for ENV_STYLE names (YAML, logs).
_ASSIGN = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_.]*)=" + _SKIP + _VALUE)
_QUOTED_KEY = re.compile(r"""(["'])([A-Za-z_][A-Za-z0-9_.\-]*)\1(\s*:\s*)(["'])""" + _SKIP
                         + r"""((?:(?!\4)[^\n])*)\4""")
_COLON = re.compile(r"(?<![A-Za-z0-9_\-])([A-Z][A-Z0-9_]*):[ \t]+" + _SKIP + r"""([^\s'",;]+)""")
# --api-key sk-..., --password=x, -token x; never the next flag (--no-auth --port 1).
_FLAG = re.compile(r"(?<![A-Za-z0-9_\-])(--?[A-Za-z0-9][A-Za-z0-9_\-]*)(=|[ \t]+)" + _SKIP + r"(?!-)" + _VALUE)

_lock = threading.Lock()
_known: set[str] = set()          # secret values this process holds: never shown verbatim
_MIN_KNOWN = 5                    # shorter values are hidden by name only (replacing "x" everywhere helps no one)


def remember(value: str | None) -> None:
    """A secret value this process holds (an arm's or the experiment's): every sink hides it
    wherever it appears, with or without a name in front of it."""
    if isinstance(value, str) and len(value) >= _MIN_KNOWN and not _TAG_RE.fullmatch(value):
        with _lock:
            _known.add(value)


# A piece of a tag that a table folded over two lines ("HF_TOKEN=<redac" + "ted:3f2a1b9c>"): the
# CLI's stdout is redacted line by line after rich laid it out, and a tag is no secret.
_TAG_PIECE = re.compile(r"<(?:r(?:e(?:d(?:a(?:c(?:t(?:e(?:d(?::[0-9a-f]{0,8}>?|>)?)?)?)?)?)?)?)?)?\u2026?")


def _hide(value: str) -> bool:
    return not _TAG_PIECE.fullmatch(value)


def redact_text(text: str) -> str:
    """Hide secrets inside free text: a value, a command line, a URL, a benchmark's output."""
    if not isinstance(text, str) or not text:
        return text
    out = text
    if _known:
        with _lock:
            known = sorted(_known, key=len, reverse=True)
        for v in known:
            if v in out:
                out = out.replace(v, REDACTED)
    out = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", out)
    for pat in _SECRET_VALUES:
        out = pat.sub(REDACTED, out)
    out = _BEARER.sub(lambda m: f"{m.group(1) or m.group(2)} {REDACTED}", out)
    out = _ASSIGN.sub(lambda m: f"{m.group(1)}={REDACTED}" if is_secret_name(m.group(1)) and _hide(m.group(2))
                      else m.group(0), out)
    out = _QUOTED_KEY.sub(lambda m: (f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}"
                                     f"{m.group(4)}") if is_secret_name(m.group(2)) and _hide(m.group(5))
                          else m.group(0), out)
    out = _COLON.sub(lambda m: f"{m.group(1)}: {REDACTED}" if is_secret_name(m.group(1)) and _hide(m.group(2))
                     else m.group(0), out)
    out = _FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}" if is_secret_name(m.group(1)) and _hide(m.group(3))
                    else m.group(0), out)
    return out


def redact_env(env: Mapping[str, str | None]) -> dict[str, str | None]:
    """Env vars with secret-named values replaced and secret-looking substrings hidden."""
    out: dict[str, str | None] = {}
    for k, v in env.items():
        if v is None:
            out[k] = None
        elif is_secret_name(k) and not _TAG_RE.fullmatch(str(v)):
            out[k] = REDACTED
        else:
            out[k] = redact_text(str(v))
    return out


def redact_tree(obj: Any) -> Any:
    """A JSON-able structure with every string redacted and string values of secret-named keys
    replaced (keys themselves are kept: they are names, not values)."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        return {k: (REDACTED if isinstance(v, str) and is_secret_name(str(k)) and not _TAG_RE.fullmatch(v)
                    else redact_tree(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_tree(v) for v in obj]
    return obj


# --------------------------------------------------------------------------- identity tags
_key_source: bytes | Callable[[], bytes] | None = None
_key: bytes | None = None
_tags: dict[str, str] = {}        # tag text -> the real value (this process only)


def use_key(key: bytes | Callable[[], bytes] | None) -> None:
    """The key of identity tags from now on: bytes, or a function giving them on first need (the
    results folder's key file is only created once a secret arm exists). ``None``: a random key
    for this process alone (identity holds within the process; nothing stored can be matched)."""
    global _key_source, _key
    with _lock:
        _key_source, _key = key, None


def _current_key() -> bytes:
    global _key
    with _lock:
        if _key is None:
            src = _key_source
            _key = (src() if callable(src) else src) or _secrets.token_bytes(32)
        return _key


def needs_tag(var: str, value: str | None) -> bool:
    """An arm's env value that must not be stored as it is: a secret-named variable, or a value
    that holds something secret-looking (a token, a URL with a password)."""
    if value is None or value == "":
        return False
    return is_secret_name(var) or redact_text(value) != value


def tag(var: str, value: str) -> str:
    """``<redacted:xxxxxxxx>``: HMAC-SHA256 of ``VAR=value`` under the current key, 8 hex digits;
    the value is remembered (hidden at every sink) and the tag maps back to it in this process."""
    digest = hmac.new(_current_key(), f"{var}={value}".encode(), hashlib.sha256).hexdigest()[:8]
    t = f"<redacted:{digest}>"
    remember(value)
    with _lock:
        _tags[t] = value
    return t


def is_tag(value: str | None) -> bool:
    """True for ``<redacted>`` and ``<redacted:xxxxxxxx>``: text that stands for a hidden value."""
    return isinstance(value, str) and bool(_TAG_RE.fullmatch(value))


def untag(value: str) -> str | None:
    """The real value behind a tag this process made, or ``None`` (a tag from a stored spec)."""
    with _lock:
        return _tags.get(value)
