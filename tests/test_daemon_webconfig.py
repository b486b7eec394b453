"""The metrics endpoint with a Prometheus web configuration (issue 43, item 7): basic auth with bcrypt
hashes, TLS with a certificate made here (openssl CLI, else the cryptography package), client
certificates; and a daemon whose port another process holds says it is not ready.

Real sockets on 127.0.0.1 port 0; the server polled as the daemon polls it (tests/test_reliab_metrics.py).
"""

from __future__ import annotations

import base64
import datetime
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from typing import Any, Dict, Optional, Tuple

import pytest

from cxlctl.config import ConfigError, load
from cxlctl.daemon import loop as loop_mod
from cxlctl.daemon.metrics import MetricsServer
from cxlctl.hostio.host import Host
from cxlctl.webconfig import WebConfigError
from cxlctl.webconfig import load as load_web
from tests.daemon_probe import ServerLoop, scrape
from tests.daemon_support import config, make_daemon, step_until, work_tree
from tests.tune_support import LIVE, pristine

bcrypt = pytest.importorskip("bcrypt", reason="the metrics-auth extra (bcrypt) is not installed")
pytest.importorskip("yaml", reason="the metrics-auth extra (PyYAML) is not installed")

PASSWORD = "s3cret-scrape"


def _hash(password: str) -> str:
    h: bytes = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4))  # cost 4: the test's time, not security
    return h.decode().replace("$2b$", "$2y$", 1)  # as htpasswd -B writes it


#: the daemon's use of the server, in a thread (tests/daemon_probe.py)
_Loop = ServerLoop


def _get(
    addr: Tuple[str, int],
    auth: Optional[Tuple[str, str]] = None,
    tls: Optional[ssl.SSLContext] = None,
) -> Tuple[int, Dict[str, str], bytes]:
    """(status, headers, body) of GET /metrics."""
    raw = socket.create_connection(addr, timeout=5)
    conn = tls.wrap_socket(raw, server_hostname="localhost") if tls is not None else raw
    with conn:
        req = "GET /metrics HTTP/1.0\r\n"
        if auth is not None:
            req += "Authorization: Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() + "\r\n"
        conn.sendall((req + "\r\n").encode())
        data = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _serve(tmp_path: Any, text: str) -> _Loop:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return _Loop(MetricsServer("127.0.0.1", 0, lambda: b"cxlctl_up 1\n", web=load_web(str(path))))


def test_basic_auth_refuses_without_or_with_wrong_credentials(tmp_path: Any) -> None:
    lp = _serve(tmp_path, f"basic_auth_users:\n  prometheus: {_hash(PASSWORD)}\n  other: {_hash('x')}\n")
    try:
        addr = lp.server.address
        code, headers, body = _get(addr)
        assert code == 401 and headers["www-authenticate"].startswith("Basic ") and b"cxlctl_up" not in body
        for cred in (("prometheus", "wrong"), ("nobody", PASSWORD), ("other", PASSWORD), ("", "")):
            code, _, body = _get(addr, cred)
            assert code == 401 and b"cxlctl_up" not in body, cred
        code, _, body = _get(addr, ("prometheus", PASSWORD))
        assert code == 200 and body == b"cxlctl_up 1\n"
        assert lp.server.refused == 5 and lp.server.served == 1
    finally:
        lp.close()


def _raw(addr: Tuple[str, int], head: bytes) -> bytes:
    return scrape(addr, timeout=5, request=head)


def test_an_open_loopback_endpoint_answers_only_requests_addressed_to_the_loopback() -> None:
    """DNS rebinding: a web page whose name now resolves to 127.0.0.1 sends its own name as Host."""
    lp = _Loop(MetricsServer("127.0.0.1", 0, lambda: b"cxlctl_up 1\n"))
    try:
        addr = lp.server.address
        for host in (b"evil.example", b"evil.example:9860", b"10.1.2.3:9860"):
            got = _raw(addr, b"GET /metrics HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
            assert got.startswith(b"HTTP/1.0 421 ") and b"cxlctl_up" not in got, host
        for line in (b"Host: 127.0.0.1:9860\r\n", b"Host: localhost\r\n", b"Host: [::1]:9860\r\n", b""):
            assert _raw(addr, b"GET /metrics HTTP/1.0\r\n" + line + b"\r\n").startswith(b"HTTP/1.0 200 "), line
    finally:
        lp.close()


def _certificate(tmp_path: Any) -> Tuple[str, str]:
    """(cert, key) of a self-signed certificate for localhost/127.0.0.1, made now."""
    crt, key = str(tmp_path / "server.crt"), str(tmp_path / "server.key")
    if shutil.which("openssl"):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt, "-days", "1"]
            + ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True,
            capture_output=True,
        )
        return crt, key
    x509 = pytest.importorskip("cryptography.x509", reason="neither the openssl CLI nor cryptography")
    import ipaddress

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    k = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(k.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(k, hashes.SHA256())
    )
    with open(crt, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key, "wb") as f:
        f.write(
            k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
    return crt, key


def _client(crt: str, cert: Optional[Tuple[str, str]] = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=crt)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def test_tls_with_basic_auth(tmp_path: Any) -> None:
    crt, key = _certificate(tmp_path)
    lp = _serve(
        tmp_path,
        f"tls_server_config:\n  cert_file: {os.path.basename(crt)}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: {_hash(PASSWORD)}\n",
    )
    try:
        addr, tls = lp.server.address, _client(crt)
        assert _get(addr, None, tls)[0] == 401
        assert _get(addr, ("prometheus", "wrong"), tls)[0] == 401
        code, _, body = _get(addr, ("prometheus", PASSWORD), tls)
        assert code == 200 and body == b"cxlctl_up 1\n"
        # plain HTTP to the TLS port: no answer in the clear
        with socket.create_connection(addr, timeout=5) as c:
            c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            try:
                got = c.recv(65536)
            except ConnectionResetError:
                got = b""
        assert b"cxlctl_up" not in got and not got.startswith(b"HTTP/")
        # a client that does not trust the certificate gets nothing either
        with pytest.raises(ssl.SSLError):
            _get(addr, ("prometheus", PASSWORD), ssl.create_default_context())
    finally:
        lp.close()


def test_client_certificates_required(tmp_path: Any) -> None:
    crt, key = _certificate(tmp_path)  # self-signed: its own CA, and the client's certificate too
    lp = _serve(
        tmp_path,
        f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {crt}\n",
    )
    try:
        addr = lp.server.address
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _get(addr, None, _client(crt))  # TLS 1.3 reports the refusal at the first read
        assert _get(addr, None, _client(crt, (crt, key)))[0] == 200
    finally:
        lp.close()


@pytest.mark.parametrize(
    "text, needle",
    [
        ("basic_auth_users:\n  p: plain-text\n", "must be a bcrypt hash"),
        ("http_server_config:\n  http2: false\n", "unsupported key(s) http_server_config"),
        ("tls_server_config:\n  cert_file: a.crt\n", "needs both cert_file and key_file"),
        ("tls_server_config:\n  cert_file: /no/such.crt\n  key_file: /no/such.key\n", "tls_server_config:"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
            "not supported",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n",
            "unsupported key(s) cipher_suites",
        ),
        ("- a list\n", "must be a mapping"),
    ],
)
def test_an_unusable_web_configuration_is_refused_by_name(tmp_path: Any, text: str, needle: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError, match=None) as e:
        load_web(str(path))
    assert needle in str(e.value)
    # and the daemon's configuration that points at it does not load (the endpoint never opens unprotected)
    cfg = tmp_path / "cxlctl.toml"
    cfg.write_text(f'[metrics]\nlisten = "127.0.0.1:0"\nweb_config = "{path}"\n')
    with pytest.raises(ConfigError) as ce:
        load(Host("/"), str(cfg), web=True)
    assert ce.value.key == "metrics.web_config" and needle in str(ce.value)
    assert load(Host("/"), str(cfg)).metrics_web_config == str(path), "`daemon metrics` needs no usable web config"


def test_a_remote_listen_needs_a_web_configuration_or_allow_remote(tmp_path: Any) -> None:
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  p: {_hash('x')}\n")
    cfg = tmp_path / "cxlctl.toml"
    cfg.write_text('[metrics]\nlisten = "0.0.0.0:9860"\n')
    with pytest.raises(ConfigError) as ce:
        load(Host("/"), str(cfg))
    assert "web_config" in str(ce.value)
    cfg.write_text(f'[metrics]\nlisten = "0.0.0.0:9860"\nweb_config = "{path}"\n')
    assert load(Host("/"), str(cfg)).metrics_web_config == str(path)


# --------------------------------------------------------------------------- a taken port: not ready


def _notify_socket(tmp_path: Any) -> Tuple[socket.socket, str]:
    path = str(tmp_path / "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.setblocking(False)
    return s, path


def _notified(s: socket.socket) -> str:
    out = []
    while True:
        try:
            out.append(s.recv(4096).decode())
        except BlockingIOError:
            return "\n".join(out)


def test_a_port_taken_first_makes_the_daemon_not_ready(tmp_path: Any, monkeypatch: Any) -> None:
    """Another local process holds the metrics port: the daemon sends no READY=1 (STATUS says why), its
    ready file is absent and cxlctl_ready is 0; once the port is free it binds, and is ready."""
    monkeypatch.setattr(loop_mod, "METRICS_RETRY", 0.2)
    thief = socket.socket()
    thief.bind(("127.0.0.1", 0))
    thief.listen(1)
    port = thief.getsockname()[1]
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    ready = "/run/cxlctl-ready/ready"
    cfg = config(metrics={"listen": f"127.0.0.1:{port}", "ready_file": ready})
    ns, addr = _notify_socket(tmp_path)
    d, _, logs = make_daemon(root, cfg, env={"NOTIFY_SOCKET": addr})
    ready_path = os.path.join(root, ready.lstrip("/"))
    try:
        d.startup()
        said = _notified(ns)
        assert "READY=1" not in said and "STATUS=not ready: metrics endpoint down: cannot listen on" in said, said
        assert not d.is_ready and not os.path.exists(ready_path)
        assert "cxlctl_ready 0" in d.metrics_text()
        assert logs.grep("not ready") and logs.grep(f"cannot listen on 127.0.0.1:{port}")
        thief.close()
        step_until(d, lambda: d.is_ready, timeout=10)
        assert "READY=1" in _notified(ns) and os.path.exists(ready_path)
        assert "cxlctl_ready 1" in d.metrics_text()
        assert d.server is not None and d.server.address == ("127.0.0.1", port)
    finally:
        d.close()
        thief.close()
        ns.close()
    assert not os.path.exists(ready_path), "the ready file goes with the daemon"


def test_the_daemon_serves_with_its_web_configuration(tmp_path: Any) -> None:
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    os.makedirs(os.path.join(root, "etc", "cxlctl"), exist_ok=True)
    with open(os.path.join(root, "etc", "cxlctl", "web.yml"), "w") as f:  # a host path: under the root
        f.write(f"basic_auth_users:\n  prometheus: {_hash(PASSWORD)}\n")
    cfg = config(metrics={"listen": "127.0.0.1:0", "web_config": "/etc/cxlctl/web.yml"})
    d, _, logs = make_daemon(root, cfg)
    try:
        d.startup()
        assert d.server is not None and d.is_ready
        addr = d.server.address
        results: Dict[str, int] = {}

        def ask() -> None:
            results["none"] = _get(addr)[0]
            results["right"] = _get(addr, ("prometheus", PASSWORD))[0]

        t = threading.Thread(target=ask)
        t.start()
        end = time.monotonic() + 10
        while t.is_alive() and time.monotonic() < end:
            d.deadlines["test-tick"] = time.monotonic() + 0.05
            d.step()
        t.join()
        assert results == {"none": 401, "right": 200}
        assert logs.grep("basic auth (1 user(s))")
    finally:
        d.close()
