"""Multilingual mode as a user runs it: `faq quickstart --encoder multilingual` builds with both encoders, a
real `faq serve` answers an English question as accurate mode does and a Spanish or German one through
multilingual-e5-small, says each query's language, answers it in that language where the FAQ has an answer in it,
and a KB set to `languages=en` refuses the others."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers.server import free_port

REPO = Path(__file__).resolve().parents[2]
TOKEN = "multilingual-admin-token-of-32-chars"
KB = {
    "reset-password": ("Use the 'Forgot password' link on the sign-in page; the link in the email works for an hour.",
                       ["How do I reset my password?", "I forgot my password"]),
    "refund": ("Refunds go back to the card you paid with within 10 days of the return arriving.",
               ["How do I get a refund?", "I want my money back"]),
    "shipping-time": ("Standard delivery takes 3 to 5 working days; express arrives the next working day.",
                      ["How long does delivery take?", "When will my parcel arrive?"]),
    "opening-hours": ("The shop is open 9:00-18:00, Monday to Saturday, and closed on Sundays.",
                      ["What are your opening hours?", "Are you open on Sunday?"]),
}
RESET_ES = "Usa el enlace '¿Olvidaste tu contraseña?' de la página de acceso; el enlace del correo vale una hora."


def run(env: dict, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_quickstart_and_serve_in_multilingual_mode(tmp_path, real_mpnet_cache):
    kb = tmp_path / "kb.jsonl"
    kb.write_text("".join(json.dumps({"faq_id": f, "question": q, "answer": a,
                                      **({"answers": {"es": RESET_ES}} if f == "reset-password" else {})}) + "\n"
                          for f, (a, qs) in KB.items() for q in qs))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAQ_")}
    env.update({"FAQ_DATA_DIR": str(tmp_path / "var"), "FAQ_MODEL_CACHE": str(real_mpnet_cache),
                "FAQ_ADMIN_TOKEN": TOKEN, "FAQ_QUERY_CACHE_SIZE": "0", "FAQ_KB_POLL_SECONDS": "0.5",
                "HF_HUB_OFFLINE": "1"})
    out = run(env, "quickstart", "--kb", str(kb), "--encoder", "multilingual", "--no-serve")
    assert "multilingual:all-mpnet-base-v2+multilingual-e5-small-q4" in out
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], cwd=REPO, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        ready = httpx.get(f"{url}/readyz").json()
        assert ready["encoder_id"].startswith("multilingual:")

        def ask(query: str) -> dict:
            r = httpx.post(f"{url}/match", json={"query": query}, timeout=60)
            assert r.status_code == 200, r.text
            return r.json()

        english = ask("I forgot my password, how can I get a new one?")
        assert english["language"] == "en" and english["answer"]["faq_id"] == "reset-password"
        assert english["answer"]["answer"] == KB["reset-password"][0]
        for query, language, faq_id in [("olvidé mi contraseña, como pongo una nueva", "es", "reset-password"),
                                        ("wann kommt mein paket an, bestellt am montag", "de", "shipping-time"),
                                        ("je voudrais etre rembourse de ma commande", "fr", "refund")]:
            body = ask(query)
            assert body["language"] == language and body["matches"][0]["faq_id"] == faq_id, body
            assert 0.0 <= body["matches"][0]["score"] <= 1.0 and body["reason"] is None
            if faq_id == "reset-password":  # the FAQ's Spanish answer; the others have none: their English one
                assert body["matches"][0]["answer"] == RESET_ES, body
            else:
                assert body["matches"][0]["answer"] == KB[faq_id][0], body
        run(env, "kb", "settings", "--set", "languages=en")
        deadline = time.monotonic() + 30
        while ask("olvidé mi contraseña, como pongo una nueva")["reason"] != "language":
            assert time.monotonic() < deadline, "the KB's languages were not picked up"
            time.sleep(0.5)
        assert ask("I forgot my password, how can I get a new one?")["decision"] == "answer"
    finally:
        proc.terminate()
        proc.wait(30)
