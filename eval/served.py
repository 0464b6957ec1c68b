"""Which model each role's server serves, as the server itself says (its model info).

An eval run pins these in eval.json, so a resumed run against other models is refused
instead of mixing their results into one results.jsonl.
"""

from __future__ import annotations

import requests

from lookahead_reasoning.runtime.servers.endpoints import ROLES, Endpoints
from lookahead_reasoning.errors import LookaheadError, first_line

TIMEOUT_S = 5.0
ROUTES = ("/model_info", "/get_model_info")  # SGLang's route, then the one older servers use


def model_path(url: str, role: str = "model", timeout_s: float = TIMEOUT_S) -> str:
    """The `model_path` a server at `url` reports; a one-line LookaheadError when it cannot say."""
    url = url.rstrip("/")
    for route in ROUTES:
        try:
            res = requests.get(url + route, timeout=timeout_s)
        except requests.Timeout:
            raise LookaheadError(f"the {role} server at {url} did not answer {route} within {timeout_s:g} s") from None
        except requests.ConnectionError:
            raise LookaheadError(f"cannot reach the {role} server at {url}") from None
        except requests.RequestException as error:
            raise LookaheadError(f"the {role} server at {url} does not answer ({first_line(error)})") from None
        if res.status_code in (404, 405) and route != ROUTES[-1]:
            continue  # an older server: try its route
        if res.status_code != 200:
            raise LookaheadError(f"the {role} server at {url} answered {route} with HTTP {res.status_code}")
        try:
            info = res.json()
        except ValueError:
            info = None
        path = info.get("model_path") if isinstance(info, dict) else None
        if not isinstance(path, str) or not path.strip():
            raise LookaheadError(f"the {role} server at {url} gave no model_path in its {route}")
        return " ".join(path.split())  # one line, whatever the server sent
    raise AssertionError("unreachable")


def served_models(endpoints: Endpoints, timeout_s: float = TIMEOUT_S) -> dict[str, str]:
    """role -> the model its server serves, for draft, target and judge (a shared server is asked once)."""
    by_url: dict[str, str] = {}
    models = {}
    for role in ROLES:
        url = getattr(endpoints, role).url
        if url not in by_url:
            by_url[url] = model_path(url, role, timeout_s)
        models[role] = by_url[url]
    return models
