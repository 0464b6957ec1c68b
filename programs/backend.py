"""The SGLang frontend backend our programs run on.

`LookaheadEndpoint` is SGLang's `RuntimeEndpoint` with two things the frontend lacks:
a timeout on every HTTP request (a hung server must not hang a run) and an optional
`sampling_seed` (SGLang honours it when the server runs with
`--enable-deterministic-inference`). Server failures surface as `BackendError`.

Every request it sends can also go through SGLang's router (`sglang-router`, workers
behind `--worker-urls`), so the same programs run against one server or many replicas:

- `gen` (steps, judge, scorer): `/generate` with one text, its sampling parameters and
  the logprob fields (`return_logprob`, `logprob_start_len`, `top_logprobs_num`,
  `return_text_in_logprobs`); the router forwards all of them.
- `fork` commits the shared prefix first: `/generate` with one text and
  `max_new_tokens: 0`. The router's cache_aware policy then sends the branches, which
  start with that text, to the replica that holds it.
- Batches (`generate_batch`: a fork's target branches, a tree level's candidates, a round's
  judge pairs): one `/generate` with a list of texts and one sampling_params each, which
  a server serves as one request. The router refuses a list of texts (HTTP 422: `text`
  must be one string); from then on that endpoint sends a batch as concurrent single
  requests, which the router routes one by one.
- `select`: upstream sends one batched `/generate`; here each choice is scored with its
  own single-text request, so that it passes the router.
- `join(mode="concate_and_append")`: upstream asks `/concate_and_append_request`, which
  neither the router nor current servers serve; `support_concate_and_append = False`
  makes the frontend append the branches' text instead.
- model info: `/model_info`, or `/get_model_info` (what the router serves).

The router re-serializes a request with its own schema and drops sampling fields it
does not know (in sglang-router 0.3.2: `stop_regex`, `spaces_between_special_tokens`);
the programs here use neither.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError, TimeoutError as RequestTimeout
from urllib3.util.retry import Retry
from sglang.lang.backend.base_backend import BaseBackend
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint, compute_normalized_prompt_logprobs
from sglang.lang.chat_template import get_chat_template, get_chat_template_by_model_path
from sglang.lang.global_config import global_config
from sglang.lang.ir import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR, SglSamplingParams

_LOGPROB_FIELDS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")
_DTYPE_REGEX = {"int": REGEX_INT, "float": REGEX_FLOAT, "str": REGEX_STR, "bool": REGEX_BOOL}


def dtype_as_regex(params: SglSamplingParams) -> SglSamplingParams:
    """`gen(dtype=...)` as the regex SGLang's frontend constrains it with (numbers also stop at a space
    or newline); a copy, the caller's parameters unchanged."""
    if params.dtype is None:
        return params
    name = params.dtype if isinstance(params.dtype, str) else getattr(params.dtype, "__name__", "")
    if name not in _DTYPE_REGEX:
        raise ValueError(f"gen(dtype={params.dtype!r}): dtype must be int, float, str or bool")
    stop = [params.stop] if isinstance(params.stop, str) else list(params.stop or ())
    if name in ("int", "float"):
        stop += [" ", "\n"]
    return dataclasses.replace(params, regex=_DTYPE_REGEX[name], stop=stop, dtype=None)


class BackendError(RuntimeError):
    """An SGLang server could not be reached, timed out or answered with an error (`status`: its HTTP status)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RequestAborted(BackendError):
    """The server ended a request on `/abort_request`; `text` and `completion_tokens`: what it had written."""

    def __init__(self, message: str, text: str = "", completion_tokens: int = 0):
        super().__init__(message)
        self.text = text
        self.completion_tokens = completion_tokens


def _connection_pool(base_url: str) -> urllib3.PoolManager:
    """Kept-alive connections to `base_url`, on which branches, judge pairs and tree candidates run as
    concurrent requests; through the proxy the environment names for it (HTTP_PROXY, HTTPS_PROXY,
    NO_PROXY), as with requests. urllib3 itself, not requests on top of it: about 1 ms less per request,
    which a round of several sequential requests pays several times."""
    url = urllib.parse.urlsplit(base_url)
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(url.hostname or ""):
        return urllib3.ProxyManager(proxy, num_pools=4, maxsize=256)
    return urllib3.PoolManager(num_pools=4, maxsize=256)


def _event_data(response) -> Iterator[bytes]:
    """The `data:` payloads of a server-sent event stream, as they arrive."""
    pending = b""
    for chunk in response.stream(4096):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip()
    if pending.startswith(b"data:"):
        yield pending[5:].strip()


def _timed_out(error: HTTPError) -> bool:
    """A connect or read timeout; in urllib3 2 a refused connection is a connect timeout too, but not slow."""
    return isinstance(error, RequestTimeout) and not isinstance(error, NewConnectionError)


class _RetryOnce(Retry):
    """One more try after any failure but a timeout, for every method: a kept-alive connection the server
    closed just as it was reused fails, and a fresh one tells that apart from a dead server. A timeout is
    not tried again, so that a server that hangs costs one timeout, not two."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
        if error is not None and _timed_out(error):
            raise error.with_traceback(_stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)


# no delay before the try; HTTP statuses (Retry-After included) and redirects are answers, handed back as they are
_RETRY = _RetryOnce(total=1, redirect=0, status=0, allowed_methods=None, raise_on_redirect=False,
                    raise_on_status=False, respect_retry_after_header=False)


class LookaheadEndpoint(RuntimeEndpoint):
    def __init__(
        self,
        base_url: str,
        chat_template: str | None = None,
        timeout_s: float = 300.0,
        seed: int | None = None,
        api_key: str | None = None,
    ):
        BaseBackend.__init__(self)
        # no KV concatenation: a router does not route it (and SGLang servers no longer serve it)
        self.support_concate_and_append = False
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.verify = None
        self.timeout_s = timeout_s
        self.seed = seed
        self.request_id: str | None = None  # SGLang's `rid` for generation requests (`with_request_id`)
        self._seen: Counter[str] = Counter()
        self._seen_lock = threading.Lock()
        self._pool = _connection_pool(self.base_url)
        self._batches_refused = threading.Event()  # shared with the `with_seed` views: one server, one answer
        # (start, end) perf_counter times of every request, when a benchmark asks for them
        self.request_log: list[tuple[float, float]] | None = None
        self.model_info = self._model_info()
        self.chat_template = (
            get_chat_template(chat_template)
            if chat_template
            else get_chat_template_by_model_path(self.model_info["model_path"])
        )

    def _send(self, method: str, path: str, payload: dict | None = None, **options):
        """One HTTP request to the server (urllib3's `options`: retries, preload_content); a server that cannot
        be reached or does not answer in time is a BackendError, an answer of any status is returned."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = urllib3.Timeout(connect=self.timeout_s, read=self.timeout_s)
        try:
            return self._pool.request(method, self.base_url + path, json=payload, headers=headers, timeout=timeout,
                                      **options)
        except HTTPError as error:
            if _timed_out(error):
                raise BackendError(f"{self.base_url + path} did not answer within {self.timeout_s:g} s") from None
            raise BackendError(f"cannot reach the SGLang server at {self.base_url}") from None

    def _request(self, method: str, path: str, payload: dict | None = None):
        """A request whose answer is JSON, with one retry (`_RetryOnce`); any status but 200 is an error."""
        url = self.base_url + path
        started = time.perf_counter()
        res = self._send(method, path, payload, retries=_RETRY)
        if self.request_log is not None:
            self.request_log.append((started, time.perf_counter()))
        if res.status != 200:
            raise BackendError(f"{url} answered HTTP {res.status}: {res.data[:300].decode(errors='replace')}", res.status)
        try:
            return res.json()
        except ValueError:
            raise BackendError(f"{url} answered with something that is not JSON") from None

    def _model_info(self) -> dict:
        """`/model_info`, or its older name `/get_model_info` on servers that predate it."""
        try:
            return self._request("GET", "/model_info")
        except BackendError as error:
            if "HTTP 404" not in str(error):
                raise
            return self._request("GET", "/get_model_info")

    def _request_seed(self, text: str) -> int:
        """Seed + (prompt, how many times this prompt was sampled): parallel samples of one
        prompt get distinct seeds, and a rerun gets the same set of seeds."""
        key = hashlib.sha256(text.encode()).hexdigest()
        with self._seen_lock:
            count = self._seen[key]
            self._seen[key] += 1
        digest = hashlib.sha256(f"{self.seed}:{key}:{count}".encode()).digest()
        return int.from_bytes(digest[:7], "big")

    def with_seed(self, seed: int | None) -> LookaheadEndpoint:
        """This backend (same server, session and chat template) with `seed` and sample counts of its own:
        one request's seed, which neither changes nor depends on what other requests send."""
        view = copy.copy(self)
        view.seed = seed
        view._seen, view._seen_lock = Counter(), threading.Lock()
        return view

    def with_request_id(self, rid: str) -> LookaheadEndpoint:
        """This backend (same server, seed and sample counts) sending `rid` as SGLang's request id with
        its generation requests, so that `abort(rid)` can stop them: a view for one request in flight
        at a time (SGLang refuses two running requests with one id)."""
        view = copy.copy(self)
        view.request_id = rid
        return view

    def abort(self, rid: str, timeout_s: float = 5.0) -> bool:
        """Ask the server to abort the request `rid` (SGLang's `/abort_request`); whether it said yes.

        The aborted request then ends with finish_reason "abort", which `_one_generation` turns into
        a BackendError. A server or router without the route (sglang-router 0.3.2's HTTP routes have
        none) answers an error: False, and the request runs out.
        """
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            res = self._pool.request("POST", self.base_url + "/abort_request", json={"rid": rid}, headers=headers,
                                     timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s), retries=False)
        except HTTPError:
            return False
        return res.status == 200

    def flush_cache(self):
        self._request("POST", "/flush_cache")

    def cache_prefix(self, prefix_str: str):
        self._request("POST", "/generate", {"text": prefix_str, "sampling_params": {"max_new_tokens": 0}})

    def commit_lazy_operations(self, s):
        self.cache_prefix(s.text_)

    def generation_request(self, text: str, sampling_params: SglSamplingParams) -> dict:
        """The `/generate` body of the frontend's `gen` after `text`, with this backend's sampling seed."""
        sampling_params = dtype_as_regex(sampling_params)
        params = {
            "skip_special_tokens": global_config.skip_special_tokens_in_output,
            "spaces_between_special_tokens": global_config.spaces_between_special_tokens_in_out,
            **sampling_params.to_srt_kwargs(),
        }
        if self.seed is not None and (sampling_params.temperature or 0) > 0:
            params["sampling_seed"] = self._request_seed(text)
        data = {"text": text, "sampling_params": params}
        if self.request_id is not None:
            data["rid"] = self.request_id
        for field in _LOGPROB_FIELDS:
            value = getattr(sampling_params, field, None)
            if value is not None:
                data[field] = value
        return data

    def generate(self, s, sampling_params):
        obj = self._generate(self.generation_request(s.text_, sampling_params))
        return obj["text"], obj["meta_info"]

    def generate_batch(self, requests_: list[dict]) -> list[dict]:
        """Requests from `generation_request`, answered in their order: one batched `/generate` (a list of
        texts, one sampling_params each), which the server batches as the frontend's fork would, at one HTTP
        request and one thread instead of one each, a fraction of the client's time. The requests share their logprob fields. Where the endpoint refuses a list of texts (a router:
        HTTP 422), they go as concurrent single requests, from then on without asking again."""
        if len(requests_) <= 1 or self._batches_refused.is_set():
            return self._generate_each(requests_)
        def logprob_fields(request: dict) -> dict:
            return {key: value for key, value in request.items() if key not in ("text", "sampling_params")}

        shared = logprob_fields(requests_[0])
        if any(logprob_fields(request) != shared for request in requests_[1:]):
            raise ValueError("the requests of a batch share their logprob fields")
        body = {"text": [r["text"] for r in requests_], "sampling_params": [r["sampling_params"] for r in requests_],
                **shared}
        try:
            answers = self._request("POST", "/generate", body)
        except BackendError as error:
            if error.status != 422:
                raise
            self._batches_refused.set()
            return self._generate_each(requests_)
        if not isinstance(answers, list) or len(answers) != len(requests_):
            raise BackendError(f"{self.base_url}/generate answered a batch of {len(requests_)} with something else")
        return [self._one_generation(answer) for answer in answers]

    def _generate(self, data: dict) -> dict:
        """One single-text (or single token list) `/generate` request; an aborted one is an error."""
        return self._one_generation(self._request("POST", "/generate", data))

    def _one_generation(self, obj) -> dict:
        """One generation as the server answered it; an error where it is not one, or was aborted."""
        if not isinstance(obj, dict) or "meta_info" not in obj:
            raise BackendError(f"{self.base_url}/generate answered with something that is not one generation")
        finish = obj["meta_info"].get("finish_reason") or {}
        if isinstance(finish, dict) and finish.get("type") == "abort":
            raise RequestAborted(f"{self.base_url} aborted a request: {finish}", str(obj.get("text", "")),
                                 int(obj["meta_info"].get("completion_tokens", 0) or 0))
        return obj

    def stream_generation(self, data: dict, on_chunk: Callable[[dict], None] | None = None) -> dict:
        """One `/generate` request (from `generation_request`) answered as a stream: `on_chunk` sees every chunk
        (cumulative `text` and `meta_info`, as SGLang streams them) as it arrives; returns the last one.

        This is the primitive behind streamed target branches: with a request id (`with_request_id`) the
        caller can `abort` the request while it runs, and the chunks tell what it had written by then. An
        aborted request raises RequestAborted with that text."""
        url = self.base_url + "/generate"
        started = time.perf_counter()
        res = self._send("POST", "/generate", {**data, "stream": True}, retries=False, preload_content=False)
        last = None
        try:
            if res.status != 200:
                raise BackendError(f"{url} answered HTTP {res.status}: {res.read()[:300].decode(errors='replace')}",
                                   res.status)
            for payload in _event_data(res):
                if payload == b"[DONE]":
                    break
                try:
                    last = json.loads(payload)
                except ValueError:
                    raise BackendError(f"{url} streamed something that is not JSON") from None
                error = last.get("error") if isinstance(last, dict) else None
                if isinstance(error, dict):  # SGLang reports a bad request inside the stream, after HTTP 200
                    code = error.get("code")
                    raise BackendError(f"{url} answered HTTP {code}: {str(error.get('message', ''))[:300]}",
                                       code if isinstance(code, int) else None)
                if on_chunk is not None and isinstance(last, dict):
                    on_chunk(last)
        except HTTPError as error:
            if _timed_out(error):
                raise BackendError(f"{url} did not answer within {self.timeout_s:g} s") from None
            raise BackendError(f"the SGLang server at {self.base_url} broke off a stream") from None
        finally:
            res.release_conn()
        if self.request_log is not None:
            self.request_log.append((started, time.perf_counter()))
        if last is None:
            raise BackendError(f"{url} ended a stream without a generation")
        return self._one_generation(last)

    def _generate_each(self, requests_: list[dict]) -> list[dict]:
        """Several single requests at once, answered in their order. On an error or Ctrl-C the others are
        not waited for (on a CPU they can take minutes); each ends within the timeout."""
        if len(requests_) <= 1:
            return list(map(self._generate, requests_))
        pool = ThreadPoolExecutor(max_workers=min(len(requests_), 64))
        try:
            return list(pool.map(self._generate, requests_))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def select(self, s, choices, temperature, choices_method):
        """SGLang's `select`, with one request per choice instead of one batched request.

        The decision is the same as upstream's: the prompt is committed first (it tells the
        prompt length, for token healing), then each `prompt + choice` is scored by the
        logprobs of its tokens, and `choices_method` decides.
        """
        assert temperature <= 1e-5, "select scores choices greedily (temperature 0)"
        prompt_len = self._generate({"text": s.text_, "sampling_params": {"max_new_tokens": 0}})["meta_info"]["prompt_tokens"]
        logprob_start_len = max(prompt_len - 2, 0)  # for token healing
        scored = self._generate_each([
            {
                "text": s.text_ + choice,
                "sampling_params": {"max_new_tokens": 0, "temperature": 0},
                "return_logprob": True,
                "return_text_in_logprobs": True,
                "logprob_start_len": logprob_start_len,
            }
            for choice in choices
        ])
        input_token_logprobs = [r["meta_info"]["input_token_logprobs"] for r in scored]
        output_token_logprobs = [r["meta_info"]["output_token_logprobs"] for r in scored]
        normalized = [compute_normalized_prompt_logprobs(logprobs) for logprobs in input_token_logprobs]
        for i, logprobs in enumerate(input_token_logprobs):  # drop the extra token where no healing happened
            healed = logprobs[0][-1] if logprobs else None
            if len(logprobs) > 1 and isinstance(healed, str) and s.text_.endswith(healed):
                normalized[i] = (normalized[i] * len(logprobs) - logprobs[0][0]) / (len(logprobs) - 1)
                input_token_logprobs[i] = logprobs[1:]
        unconditional = None
        if choices_method.requires_unconditional_logprobs:
            unconditional = [
                r["meta_info"]["input_token_logprobs"]
                for r in self._generate_each([
                    {"input_ids": [entry[1] for entry in logprobs], "sampling_params": {"max_new_tokens": 0},
                     "return_logprob": True}
                    for logprobs in input_token_logprobs
                ])
            ]
        return choices_method(
            choices=choices,
            normalized_prompt_logprobs=normalized,
            input_token_logprobs=input_token_logprobs,
            output_token_logprobs=output_token_logprobs,
            unconditional_token_logprobs=unconditional,
        )

    def concatenate_and_append(self, src_rids, dst_rid):
        raise BackendError("KV concatenation is not supported; join forks with mode='gather_variable'")
