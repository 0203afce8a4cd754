"""FAQ_TRUSTED_PROXIES: which proxies' X-Forwarded-For and X-Forwarded-Proto `faq serve` believes, and so
when the console's cookie is Secure; the compose proxy (docker/nginx.conf) with real nginx when it is
installed."""
from __future__ import annotations

import re
import shutil

import httpx
import pytest
from pydantic import ValidationError

from app.settings import Settings
from cli.serve import uvicorn_options
from tests.helpers.api import make_settings, make_store
from tests.helpers.server import LiveServer

TOKEN = "proxy-admin-token-0123456789abcdef-0123456789"
FORGED = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.9"}


def test_the_setting_takes_addresses_networks_or_star_and_names_itself_when_wrong():
    assert Settings(trusted_proxies=" 10.0.0.0/8 , ::1,192.168.1.5").trusted_proxies == "10.0.0.0/8,::1,192.168.1.5"
    assert Settings(trusted_proxies="*").trusted_proxies == "*"
    assert Settings().trusted_proxies == "127.0.0.1,::1"
    for bad in ("nginx", "10.0.0.0/33", "", "127.0.0.1;10.0.0.1"):
        with pytest.raises(ValidationError, match="FAQ_TRUSTED_PROXIES"):
            Settings(trusted_proxies=bad)


def test_faq_serve_hands_the_list_to_uvicorn():
    options = uvicorn_options(Settings(trusted_proxies="10.1.2.3"))
    assert options["proxy_headers"] is True and options["forwarded_allow_ips"] == "10.1.2.3"


def sign_in_cookie(url: str, headers: dict) -> str:
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        page = client.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        # the login form's own cookie is Secure too when the scheme is https: send it back by hand
        sent = "; ".join(f"{name}={value}" for name, value in page.cookies.items())
        r = client.post("/console/login", data={"csrf": csrf, "token": TOKEN}, follow_redirects=False,
                        headers={"cookie": sent})
        assert r.status_code == 303, r.text
        return next(v for k, v in r.headers.multi_items() if k == "set-cookie" and v.startswith("faq_console="))


@pytest.mark.parametrize("trusted, secure", [("127.0.0.1,::1", True), ("10.9.8.7", False)])
def test_the_cookie_is_secure_only_when_a_trusted_proxy_says_https(tmp_path, encoder, trusted, secure):
    from app.api.main import create_app

    settings = make_settings(tmp_path, admin_token=TOKEN, trusted_proxies=trusted)
    store = make_store(settings)
    with LiveServer(create_app(settings, store=store, encoder=encoder), **uvicorn_options(settings)) as server:
        cookie = sign_in_cookie(server.url, FORGED).lower()
        plain = sign_in_cookie(server.url, {}).lower()
    assert ("; secure" in cookie) is secure
    assert "; secure" not in plain and "httponly" in plain


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (Debian: nginx-light)")
def test_behind_the_compose_proxy_the_console_cookie_is_secure(tmp_path):
    from bench import security_sessions

    result = security_sessions.check_proxy_cookie(tmp_path / "work")
    cases = {row["sign-in through"]: row for row in result["table"]}
    assert cases["nginx https (compose proxy, :8443)"]["secure"] is True
    assert cases["nginx http (:8080)"]["secure"] is False
    assert cases["direct, forged headers, proxy list 10.9.8.7"]["secure"] is False
    # nginx passes the client's own address on, and only a trusted proxy's word is taken for it
    seen = result["clients_seen"]
    assert set(seen["FAQ_TRUSTED_PROXIES unset (127.0.0.1,::1), through nginx"]) == {security_sessions.PROXY_CLIENT}
    assert set(seen["FAQ_TRUSTED_PROXIES=10.9.8.7 (forged)"]) == {security_sessions.PROXY_CLIENT}
    assert result["ok"]


@pytest.mark.parametrize("trusted, kept_apart", [("127.0.0.1,::1", True), ("10.9.8.7", False)])
def test_the_sign_in_throttle_counts_the_client_a_trusted_proxy_names(tmp_path, encoder, trusted, kept_apart):
    """Behind a listed proxy each forwarded client has its own count; an unlisted proxy's clients all look
    like the proxy, so one client's wrong guesses lock out the others (why the setting matters)."""
    from app.api.main import create_app

    settings = make_settings(tmp_path, admin_token=TOKEN, trusted_proxies=trusted)
    with LiveServer(create_app(settings, store=make_store(settings), encoder=encoder),
                    **uvicorn_options(settings)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        def sign_in(token: str, client_address: str) -> httpx.Response:
            page = client.get("/console/login", headers={"X-Forwarded-For": client_address})
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            return client.post("/console/login", data={"csrf": csrf, "token": token}, follow_redirects=False,
                               headers={"X-Forwarded-For": client_address})

        guesses = [sign_in(f"wrong-{i}", "198.51.100.1").status_code for i in range(12)]
        right = sign_in(TOKEN, "198.51.100.2")
    assert guesses[:10] == [401] * 10 and guesses[10:] == [429, 429]
    assert right.status_code == (303 if kept_apart else 429)
