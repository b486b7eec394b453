"""The daemon's metrics endpoint's TLS and basic authentication: Prometheus' web configuration file.

Why this format: it is the one every Prometheus exporter reads (node_exporter's
``--web.config.file``, the exporter-toolkit's ``docs/web-configuration.md``), so an
operator's existing file, its bcrypt hashes (``htpasswd -nBC 10 ''``) and its
certificates work unchanged, and Prometheus' own scrape configuration
(``basic_auth``, ``tls_config``) is what talks to it.  ``[metrics] web_config``
names the file (docs/daemon.md).

Understood, as the toolkit spells them::

    tls_server_config:
      cert_file: server.crt          # relative paths: from the file's directory
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # NoClientCert (default) | VerifyClientCertIfGiven
      client_ca_file: ca.crt
      min_version: TLS12             # TLS12 (default) | TLS13
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt

Anything else (cipher suites, curves, ``http_server_config``, inline keys) is refused by
name rather than ignored: a setting an operator wrote and the daemon skipped would be a
silent hole.  The toolkit's ``RequestClientCert`` and ``RequireAnyClientCert`` (a client
certificate taken without verifying it) have no counterpart in Python's ssl module and
are refused too.

TLS through the stdlib :mod:`ssl`; bcrypt through the ``bcrypt`` package (the
``metrics-auth`` extra with PyYAML for the file): a password hash must be checked by a
well-kept implementation, not by code of our own.  Both are imported only when a web
configuration is set.

Beside :mod:`cxlctl.config`, not in the daemon package: the configuration loader checks the
file a ``web_config`` names (a daemon start or reload with an unusable one is refused), and the
configuration must not import the daemon.
"""

from __future__ import annotations

import base64
import hmac
import os
import ssl
from typing import Any, Dict, Optional

from cxlctl.hostio.reader import Reader, Unreadable
from cxlctl.namedrecord import NamedTuple

#: the exporter-toolkit's client_auth_type values Python's ssl can honour → verify mode
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version")
_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
#: a bcrypt hash of nothing anyone sends: an unknown user costs the same bcrypt check as a known one,
#: so the time of a 401 does not tell which user names exist (the toolkit does the same)
_DUMMY_HASH = b"$2b$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
MAX_BYTES = 1 << 20
INSTALL_HINT = "pip install 'cxlctl[metrics-auth]' (bcrypt and PyYAML)"


class WebConfigError(ValueError):
    """A web configuration that cannot be used; the message names the key."""


class WebConfig(NamedTuple):
    source: str
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    client_ca_file: Optional[str] = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    users: Dict[str, bytes] = {}

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    def describe(self) -> str:
        parts = []
        if self.tls:
            parts.append("TLS" + (f", client certificates {self.client_auth_type}" if self.client_ca_file else ""))
        if self.users:
            parts.append(f"basic auth ({len(self.users)} user(s))")
        return " + ".join(parts) or "no TLS, no authentication"


def _path(base: str, v: Any, key: str) -> str:
    if not isinstance(v, str) or not v:
        raise WebConfigError(f"tls_server_config.{key} must be a file name, got {v!r}")
    return v if os.path.isabs(v) else os.path.join(base, v)


def parse(source: str, text: str) -> WebConfig:
    """A web configuration's text → :class:`WebConfig` (files not opened yet: :func:`ssl_context`)."""
    try:
        import yaml
    except ImportError:
        raise WebConfigError(f"reading a web configuration needs PyYAML: {INSTALL_HINT}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise WebConfigError(f"not YAML: {str(e).splitlines()[0]}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise WebConfigError("must be a mapping (tls_server_config, basic_auth_users)")
    unknown = set(doc) - {"tls_server_config", "basic_auth_users"}
    if unknown:
        raise WebConfigError(
            f"unsupported key(s) {', '.join(sorted(map(str, unknown)))} (cxlctl reads tls_server_config and basic_auth_users)"
        )
    base = os.path.dirname(os.path.abspath(source))
    fields: Dict[str, Any] = {"source": source}
    tls = doc.get("tls_server_config") or {}
    if not isinstance(tls, dict):
        raise WebConfigError("tls_server_config must be a mapping")
    bad = set(tls) - set(_TLS_KEYS)
    if bad:
        raise WebConfigError(
            f"tls_server_config: unsupported key(s) {', '.join(sorted(map(str, bad)))} (supported: {', '.join(_TLS_KEYS)})"
        )
    if tls:
        if "cert_file" not in tls or "key_file" not in tls:
            raise WebConfigError("tls_server_config needs both cert_file and key_file")
        fields["cert_file"] = _path(base, tls["cert_file"], "cert_file")
        fields["key_file"] = _path(base, tls["key_file"], "key_file")
        auth = tls.get("client_auth_type", "NoClientCert")
        if auth not in CLIENT_AUTH:
            raise WebConfigError(
                f"tls_server_config.client_auth_type {auth!r} is not supported (use one of {', '.join(CLIENT_AUTH)})"
            )
        fields["client_auth_type"] = auth
        if "client_ca_file" in tls:
            fields["client_ca_file"] = _path(base, tls["client_ca_file"], "client_ca_file")
        elif auth != "NoClientCert":
            raise WebConfigError(f"tls_server_config.client_auth_type {auth} needs client_ca_file")
        ver = tls.get("min_version", "TLS12")
        if ver not in _VERSIONS:
            raise WebConfigError(f"tls_server_config.min_version {ver!r}: use TLS12 or TLS13")
        fields["min_version"] = ver
    users = doc.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise WebConfigError("basic_auth_users must map user names to bcrypt hashes")
    out: Dict[str, bytes] = {}
    for name, h in users.items():
        if not isinstance(name, str) or not isinstance(h, str) or not h.startswith(("$2a$", "$2b$", "$2y$")):
            raise WebConfigError(f"basic_auth_users.{name}: must be a bcrypt hash ($2y$..., htpasswd -nBC 10 '')")
        out[name] = h.encode("ascii")
    if out:
        try:
            import bcrypt  # noqa: F401
        except ImportError:
            raise WebConfigError(f"basic_auth_users needs bcrypt: {INSTALL_HINT}") from None
    fields["users"] = out
    return WebConfig(**fields)


def load(path: str) -> WebConfig:
    """Read and parse ``path`` (bounded, through the fenced reader) and build its TLS context once,
    so a missing certificate or a key that does not match is reported at load, not at the first scrape."""
    try:
        raw = Reader().read(os.path.abspath(path), limit=MAX_BYTES)
    except Unreadable as e:
        raise WebConfigError(f"cannot read {path}: {e.reason}") from None
    if raw is None:
        raise WebConfigError(f"{path}: no such file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WebConfigError(f"{path}: not UTF-8 text") from None
    wc = parse(path, text)
    ssl_context(wc)
    return wc


def ssl_context(wc: WebConfig) -> Optional[ssl.SSLContext]:
    """The server's TLS context (None without ``tls_server_config``)."""
    if not wc.tls:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[wc.min_version]
    try:
        assert wc.cert_file is not None
        ctx.load_cert_chain(wc.cert_file, wc.key_file)
        if wc.client_ca_file is not None:
            ctx.load_verify_locations(cafile=wc.client_ca_file)
    except (OSError, ssl.SSLError) as e:
        raise WebConfigError(f"tls_server_config: {getattr(e, 'strerror', None) or e}") from None
    ctx.verify_mode = CLIENT_AUTH[wc.client_auth_type]
    return ctx


def authorized(wc: WebConfig, head: bytes) -> bool:
    """Whether a request's head (request line and headers) carries a user and password of
    ``basic_auth_users``; True when the configuration has no users."""
    if not wc.users:
        return True
    import bcrypt

    cred = None
    for line in head.split(b"\n")[1:]:
        field, sep, value = line.partition(b":")
        if sep and field.strip().lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"basic":
                cred = token.strip()
            break
    if cred is None:
        return False
    try:
        user_b, sep, password = base64.b64decode(cred, validate=True).partition(b":")
    except ValueError:
        return False
    if not sep:
        return False
    # every name of the file compared in constant time, and one bcrypt check whatever the name
    known = None
    for name, h in wc.users.items():
        if hmac.compare_digest(name.encode("utf-8"), user_b):
            known = h
    try:
        ok = bcrypt.checkpw(password, known if known is not None else _DUMMY_HASH)
    except ValueError:  # a malformed hash in the file
        return False
    return ok and known is not None and bool(user_b)
