"""Keeping secrets out of what benchfill writes and says.

Secrets come from the environment only (an endpoint's ``api_key_env``, PostgreSQL's ``PGPASSWORD`` or
``~/.pgpass``). What is given as text (a config, ``--store``, ``--scorer``) may therefore carry none:
``url_credentials`` says what a URL carries (a password or any user-info in its authority, or a query
parameter whose name looks like a secret: ``password``, ``token``, ``api_key``, ``key``, ``sig`` ...),
so that the caller refuses it in one line naming the option or field. ``redact_url`` hides the same
parts of a URL that is shown anyway (a store URL in an error).

What a server says is not ours to check: an error body may echo the request's headers, the key among
them. ``scrub`` takes such a text before it becomes a message, a log line or a record: the values of the
named environment variables (the configured endpoints' keys) and anything shaped like a credential
(``Bearer <token>``, an ``authorization``/``api-key`` header's value, ``sk-...``, ``hf_...``) become ``***``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote_plus

MASK = "***"

# Shapes of real provider keys (OpenAI/Anthropic "sk-...", HF "hf_...", Google "AIza..."), and bearer tokens.
_KEY_SHAPE = r"\bsk-[A-Za-z0-9_\-]{12,}|\bhf_[A-Za-z0-9]{20,}|\bAIza[0-9A-Za-z_\-]{20,}"
SECRET_VALUE = re.compile(rf"({_KEY_SHAPE}|Bearer\s+\S{{12,}})")
_KEY_SHAPES = re.compile(_KEY_SHAPE)

# A query parameter's name that looks like a secret: one of these words as a part of the name
# ("access_token", "X-Amz-Signature", "subscription-key"), one of the longer ones anywhere in it
# ("sslpassword", "accessToken"), or one of the short ones as the whole name ("auth", "code"). Not
# libpq's "sslkey" or "passfile" (paths to a file), "require_auth" or "target_session_attrs".
_SECRET_PART = {"password", "passwd", "pwd", "secret", "token", "key", "apikey", "authorization", "signature",
                "sig", "credential", "credentials", "jwt", "bearer"}
_SECRET_WITHIN = ("password", "passwd", "secret", "token", "apikey", "credential", "signature")
_SECRET_WHOLE = {"auth", "pass", "code"}  # "code": an Azure Functions key

_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*://"
_PARTS = re.compile(rf"^(\s*{_SCHEME})([^/?#]*)([^?#]*)(?:\?([^#]*))?(.*)$", re.S)
_URL_IN_TEXT = re.compile(_SCHEME + r"[^\s\"'<>]+")


def secret_name(name: str) -> bool:
    """Whether a query parameter's (or a header's) name looks like it holds a secret."""
    low = name.strip().lower().replace("-", "_")
    if low in _SECRET_WHOLE or any(w in low.replace("_", "") for w in _SECRET_WITHIN):
        return True
    return any(part in _SECRET_PART for part in low.split("_"))


def _split(url: str) -> tuple[str, str, str, str | None, str] | None:
    """(scheme://, authority, path, query or None, fragment) of a URL, by its text (nothing decoded or
    checked, so that a malformed URL is still taken apart), or None for no URL."""
    m = _PARTS.match(url)
    return None if m is None else m.groups()  # type: ignore[return-value]


def _hidden_userinfo(authority: str, path: str) -> bool:
    """``http://u:pa/ss@host``: a password with an unescaped ``/`` ends the authority early, leaving a
    "port" that is no number and an ``@`` in the path."""
    host = authority.rsplit("]", 1)[-1]  # an IPv6 literal's colons are no port
    return "@" in path and ":" in host and not host.rsplit(":", 1)[1].isdigit()


def secret_params(url: str) -> list[str]:
    """The names of a URL's query parameters that look like secrets and have a value."""
    parts = _split(url)
    if parts is None or not parts[3]:
        return []
    return [k for k, v in parse_qsl(parts[3], keep_blank_values=True) if v and secret_name(k)]


def url_credentials(url: str, *, user: bool = True) -> str | None:
    """What in ``url`` is a credential, in words for a message that must not show it, or None.

    A password in its user-info always is, and so is a query parameter named like a secret. ``user``:
    user-info without a password is one too (an endpoint's ``http://TOKEN@host``; pass False for a
    database URL, whose user name is no secret).
    """
    parts = _split(url)
    if parts is None:
        return None
    _, authority, path, _, _ = parts
    if "@" in authority:
        if ":" in authority.rsplit("@", 1)[0]:
            return "a password"
        if user:
            return "a name or token before '@'"
    elif _hidden_userinfo(authority, path):
        return "a password"
    names = secret_params(url)
    if names:
        return f"a secret in its query string: {', '.join(dict.fromkeys(names))}"
    return None


def text_credentials(text: str) -> str | None:
    """What a URL inside ``text`` carries as a credential (``url_credentials``, a user name allowed)."""
    for m in _URL_IN_TEXT.finditer(text):
        what = url_credentials(m.group(0), user=False)
        if what:
            return what
    return None


def redact_url(url: str) -> str:
    """``url`` fit for a message: its password and its secret-looking query values replaced by ``***``
    (a user name is kept: a database URL's says which account is meant)."""
    parts = _split(url)
    if parts is None:
        return url
    head, authority, path, query, fragment = parts
    if "@" in authority:
        creds, host = authority.rsplit("@", 1)
        if ":" in creds:
            authority = f"{creds.split(':', 1)[0]}:{MASK}@{host}"
    elif _hidden_userinfo(authority, path):
        host, slash, rest = path.rsplit("@", 1)[1].partition("/")
        authority, path = f"{MASK}@{host}", slash + rest
    if query is None:
        return head + authority + path + fragment
    fields = []
    for field in query.split("&"):
        name, sep, value = field.partition("=")
        fields.append(f"{name}={MASK}" if sep and value and secret_name(unquote_plus(name)) else field)
    return head + authority + path + "?" + "&".join(fields) + fragment


# Headers that carry a credential, as an error body or a debug line may echo them: "'authorization':
# 'Bearer ...'" (a dict's repr), '"api-key": "..."' (JSON), "x-api-key: ..." (a header line).
_HEADER = re.compile(
    r"""(?ix)
    (\b(?:proxy[-_])?authorization|\b(?:x[-_])?api[-_]key|\bx[-_]goog[-_]api[-_]key|\b(?:x[-_]auth|x[-_]api|private)[-_]token
     |\bset[-_]cookie|\bcookie)
    (["']?\s*[:=]\s*["']?)          # the separator, quoted or not
    (?:(bearer|basic|token|digest)\s+)?  # an auth scheme, kept
    ([^\s"',;}\]]+)                 # the value
    """)
# A token after an auth scheme in free text; one with a digit or a symbol in it, so that prose such as
# "Bearer authentication" is left alone.
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+(?=[A-Za-z0-9._~+/=\-]*[0-9_.~+/=\-])[A-Za-z0-9._~+/=\-]{8,}")
_MIN_KNOWN = 6  # a known value shorter than this is not masked (it would garble the text, "EMPTY" among them)
_ECHO_HEAD = 8  # a key's first characters before a run of * or an ellipsis: the server's masked echo of it


def env_values(names: Iterable[str | None]) -> list[str]:
    """The values of the named environment variables that are set (the configured keys), read now."""
    return [v for v in (os.environ.get(n) for n in names if n) if v]


def scrub(text: str, *, env: Iterable[str | None] = (), values: Iterable[str | None] = ()) -> str:
    """``text`` without credentials: the values of the environment variables named in ``env`` and the
    ``values`` given, then anything shaped like one (header values, bearer tokens, provider keys)."""
    if not text:
        return text
    known = sorted({v for v in [*env_values(env), *values] if v and len(v) >= _MIN_KNOWN}, key=len, reverse=True)
    for v in known:
        text = text.replace(v, MASK)
    for v in known:  # a server's own masked echo, OpenAI's "sk-LEAKT****AAAA": the head and tail are the key's
        if len(v) >= 2 * _ECHO_HEAD:
            text = re.sub(re.escape(v[:_ECHO_HEAD]) + r"[^\s*\u2026]*(?:\*+|\u2026|\.{3})[A-Za-z0-9_\-]*", MASK, text)
    text = _HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) + ' ' if m.group(3) else ''}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    return _KEY_SHAPES.sub(MASK, text)
