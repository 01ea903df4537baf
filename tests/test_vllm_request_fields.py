"""Every field of vLLM's own request models is either honoured by specgw's (a field of
``gateway.protocol``'s model) or listed in its ``UNHONOURED`` table with vLLM's default
among the values that ask for nothing; any other value is a 400 naming the field. A vLLM
release that adds a request field fails here until it is placed, so no vLLM client's
parameter is dropped without a word."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from conftest import MODEL, ROOT, Server, openai_client, ready_until_teardown
from pydantic import BaseModel, Field
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionRequest as VllmChat,
)
from vllm.entrypoints.openai.completion.protocol import CompletionRequest as VllmCompletion

from gateway.errors import OpenAIError
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from gateway.sampling import reject_unsupported

PAIRS = [(CompletionRequest, VllmCompletion, {"prompt": "x"}),
         (ChatCompletionRequest, VllmChat, {"messages": [{"role": "user", "content": "x"}]})]
IDS = ["completions", "chat"]
# Fields whose default vLLM draws per request (request_id: a fresh uuid): any value a
# client sends is its own choice, so none asks for nothing.
DRAWN = {"request_id"}


@pytest.mark.parametrize(("ours", "theirs", "base"), PAIRS, ids=IDS)
def test_every_vllm_field_is_honoured_or_refused(ours, theirs, base):
    unplaced = set(theirs.model_fields) - set(ours.model_fields) - set(ours.UNHONOURED)
    assert not unplaced, f"vLLM request fields neither honoured nor refused: {unplaced}"
    stale = set(ours.UNHONOURED) - set(theirs.model_fields)
    assert not stale, f"UNHONOURED names fields vLLM no longer has: {stale}"
    honoured_and_refused = set(ours.UNHONOURED) & set(ours.model_fields)
    assert not honoured_and_refused
    for name in set(ours.UNHONOURED) - DRAWN:
        default = theirs.model_fields[name].get_default(call_default_factory=True)
        assert default in ours.UNHONOURED[name], (name, default)
        # vLLM's default is accepted...
        reject_unsupported(ours(model="m", **base, **{name: default}), speculative=True)


@pytest.mark.parametrize(("ours", "theirs", "base"), PAIRS, ids=IDS)
@pytest.mark.parametrize("field", ["use_beam_search", "priority", "structured_outputs",
                                   "truncate_prompt_tokens", "request_id"])
def test_a_value_that_asks_for_something_is_a_400_naming_it(ours, theirs, base, field):
    value = {"use_beam_search": True, "priority": 5, "structured_outputs": {"regex": "a+"},
             "truncate_prompt_tokens": 4, "request_id": "mine"}[field]
    req = ours(model="m", **base, **{field: value})
    with pytest.raises(OpenAIError) as info:
        reject_unsupported(req, speculative=True)
    assert info.value.status == 400
    assert info.value.param == field and info.value.code == "unsupported_parameter"


def test_fields_of_neither_api_are_still_ignored():
    req = CompletionRequest(model="m", prompt="x", some_future_openai_field={"a": 1})
    reject_unsupported(req, speculative=True)


PROMPT = "def fib(n):"


def greedy(client, **extra):
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0,
                                  extra_body=extra or None)
    return r.choices[0]


def test_stop_token_ids_stop_the_real_engine(client):
    from transformers import AutoTokenizer

    free = greedy(client, ignore_eos=True)
    tok = AutoTokenizer.from_pretrained(ROOT / "models/tiny-code-llama/target")
    ids = tok.encode(free.text, add_special_tokens=False)
    stopped = greedy(client, ignore_eos=True, stop_token_ids=[ids[len(ids) // 2]])
    assert stopped.finish_reason == "stop", stopped
    assert len(stopped.text) < len(free.text) and free.text.startswith(stopped.text)


def test_include_stop_str_in_output_on_the_real_engine(client):
    free = greedy(client, ignore_eos=True).text
    stop = free[6:9]
    cut = free[:free.index(stop)]
    assert greedy(client, ignore_eos=True, stop=[stop]).text == cut
    assert greedy(client, ignore_eos=True, stop=[stop],
                  include_stop_str_in_output=True).text == cut + stop


class Point(BaseModel):
    # Bounded, so the 5M-parameter code model finishes well within max_tokens.
    label: str = Field(max_length=6)
    x: int = Field(ge=0, le=99)
    y: int = Field(ge=0, le=99)


def test_response_format_constrains_a_completion(client):
    # Unconstrained, this code model writes Python after "point = ": only the grammar
    # makes a finished answer parse, let alone match the schema.
    schema = {"type": "json_schema", "json_schema": {
        "name": "point", "strict": True, "schema": Point.model_json_schema()}}
    r = client.completions.create(model=MODEL, prompt="point = ", max_tokens=80,
                                  temperature=0, extra_body={"response_format": schema})
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    Point.model_validate_json(choice.text)
    r = client.completions.create(model=MODEL, prompt="point = ", max_tokens=80,
                                  temperature=0,
                                  extra_body={"response_format": {"type": "json_object"}})
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    assert isinstance(json.loads(choice.text), dict), choice.text


def test_unhonoured_vllm_field_is_a_400_from_the_server(client):
    with pytest.raises(openai.BadRequestError) as info:
        greedy(client, structured_outputs={"regex": "a+"})
    err = info.value.body
    assert err["param"] == "structured_outputs" and err["code"] == "unsupported_parameter"
    assert greedy(client, use_beam_search=False, priority=0).finish_reason  # defaults pass


def test_stop_token_ids_beyond_the_vocabulary_are_a_400_not_a_dead_engine(client):
    # With min_tokens vLLM masks the stop ids' logits by index (int32). vLLM 0.32's own
    # SamplingParams.verify refuses such ids as well, so on this engine the test holds
    # the answer (a 400 naming the field, the engine serving on), not which check gave it.
    vocab = 4096  # models/tiny-code-llama's tokenizer
    for ids in ([vocab], [2**31], [2**63 - 1]):
        with pytest.raises(openai.BadRequestError) as info:
            greedy(client, stop_token_ids=ids, min_tokens=2)
        assert info.value.body["param"] == "stop_token_ids", info.value.body
    assert greedy(client, stop_token_ids=[vocab - 1], min_tokens=2).text


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_stop_token_ids_beyond_the_vocabulary_are_a_400_before_a_stream_opens(base_url, path):
    # vLLM's own check runs only once the request reaches the engine, after the SSE
    # response has started (a 200 and an error event): the answer must come first.
    body = {"model": MODEL, "max_tokens": 4, "stream": True, "min_tokens": 2,
            "stop_token_ids": [4096]}
    body |= ({"prompt": PROMPT} if path == "/v1/completions"
             else {"messages": [{"role": "user", "content": PROMPT}]})
    r = httpx.post(f"{base_url}{path}", json=body, timeout=120)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    assert r.json()["error"]["param"] == "stop_token_ids", r.text


def chat(client, **extra):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=4,
        temperature=0, extra_body=extra or None)


def test_chat_template_kwargs_reach_the_template(client):
    # The bundled template starts with {{ bos_token }}: a variable the request may set,
    # as vLLM lets it (transformers lets template kwargs override the special tokens).
    plain = chat(client).usage.prompt_tokens
    doubled = chat(client, chat_template_kwargs={"bos_token": "<|bos|><|bos|>"})
    assert doubled.usage.prompt_tokens == plain + 1
    # A variable this template does not read (Qwen3's) changes nothing and is no error.
    assert chat(client, chat_template_kwargs={"enable_thinking": False}).usage.prompt_tokens \
        == plain
    assert chat(client, reasoning_effort="none").choices[0].finish_reason


@pytest.mark.parametrize("key", ["tokenize", "return_dict", "add_generation_prompt", "tools",
                                 "conversations", "self"])
def test_chat_template_call_parameters_are_a_400(client, key):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, chat_template_kwargs={key: True})
    err = info.value.body
    # Refused by name, not a TypeError out of transformers' call (which names the key too).
    assert key in err["message"] and "a parameter of the template call" in err["message"], err
    assert err["param"] == "chat_template_kwargs", err
    assert chat(client).choices[0].finish_reason  # the server serves on


def test_reasoning_effort_none_turns_thinking_off_as_vllm_renders_it():
    from gateway.serving.chat import template_kwargs

    def req(**extra):
        return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                     **extra)

    assert template_kwargs(req(reasoning_effort="none")) == {"enable_thinking": False}
    assert template_kwargs(req(reasoning_effort="none",
                               chat_template_kwargs={"enable_thinking": True})) == {
        "enable_thinking": True}
    assert template_kwargs(req()) == {}


# A Llama-style model dir beside the bundled one: its tokenizer writes BOS on a plain
# encode (the bundled one has a BOS token but never adds it, so add_special_tokens is a
# no-op there), and its template, like Llama 3.1's, reads a date_string variable and,
# like many, refuses a system message that is not first. Its tokenizer also holds
# EXTRA_TOKENS added tokens past the model's 4096-row embedding, so len(tokenizer) is not
# the model's vocabulary (as where a tokenizer's added specials outgrow a trimmed model).
BOS_MODEL = "tiny-bos"
EXTRA_TOKENS = 4
_TEMPLATE_CHECKS = (
    "{%- for message in messages %}{%- if message['role'] == 'system' and not loop.first %}"
    "{{ raise_exception('the system message must come first') }}{%- endif %}{%- endfor %}"
    "{%- if date_string is defined %}{{ '<|system|>\\nToday Date: ' + date_string + '\\n' }}"
    "{%- endif %}")


def bos_model_dir(dst: Path) -> Path:
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    src = ROOT / "models/tiny-code-llama/target"
    for name in ("config.json", "model.safetensors", "special_tokens_map.json",
                 "generation_config.json"):
        (dst / name).symlink_to(src / name)
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    bos = "<|bos|>"
    tok.post_processor = TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                            special_tokens=[(bos, tok.token_to_id(bos))])
    assert tok.add_special_tokens([f"<|extra{i}|>" for i in range(EXTRA_TOKENS)]) \
        == EXTRA_TOKENS
    tok.save(str(dst / "tokenizer.json"))
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    head = "{{ bos_token }}"
    assert cfg["chat_template"].startswith(head)
    cfg["chat_template"] = head + _TEMPLATE_CHECKS + cfg["chat_template"][len(head):]
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module")
def bos_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = bos_model_dir(tmp_path_factory.mktemp(BOS_MODEL))
    srv = Server("gateway-bos", ["--log-format", "text", "--model", str(model),
                                 "--served-model-name", BOS_MODEL])
    yield from ready_until_teardown(srv)


@pytest.fixture(scope="module")
def bos_client(bos_server: Server) -> openai.OpenAI:
    return openai_client(bos_server.url)


def bos_prompt_tokens(client: openai.OpenAI, chat_api: bool, **extra) -> int:
    if chat_api:
        r = client.chat.completions.create(
            model=BOS_MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=1,
            extra_body=extra or None)
    else:
        r = client.completions.create(model=BOS_MODEL, prompt=PROMPT, max_tokens=1,
                                      extra_body=extra or None)
    return r.usage.prompt_tokens


def test_add_special_tokens_is_honoured_with_vllms_defaults(bos_client):
    # Completions: the tokenizer's BOS unless the request says false.
    plain = bos_prompt_tokens(bos_client, False, add_special_tokens=False)
    assert bos_prompt_tokens(bos_client, False) == plain + 1
    assert bos_prompt_tokens(bos_client, False, add_special_tokens=True) == plain + 1
    # Chat: the template writes its own BOS, a second one only when asked for.
    plain = bos_prompt_tokens(bos_client, True)
    assert bos_prompt_tokens(bos_client, True, add_special_tokens=False) == plain
    assert bos_prompt_tokens(bos_client, True, add_special_tokens=True) == plain + 1


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_token_ids_are_bounded_by_the_models_vocabulary_not_only_the_tokenizers(
        bos_server, bos_client, path):
    vocab = 4096  # the embedding's rows; the tokenizer holds EXTRA_TOKENS more
    tok_len = vocab + EXTRA_TOKENS
    # Stop ids index the logits (the model's width): vLLM's own bound, answered before a
    # stream opens.
    body = {"model": BOS_MODEL, "max_tokens": 4, "stream": True, "min_tokens": 2,
            "stop_token_ids": [vocab]}
    body |= ({"prompt": PROMPT} if path == "/v1/completions"
             else {"messages": [{"role": "user", "content": PROMPT}]})
    r = httpx.post(f"{bos_server.url}{path}", json=body, timeout=120)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "stop_token_ids", r.text
    assert f"[0, {vocab})" in r.json()["error"]["message"], r.text
    if path == "/v1/completions":
        # A prompt id the tokenizer holds but the embedding does not: a 400, not a
        # lookup past the embedding's last row.
        for ids in ([5, vocab], [tok_len - 1]):
            with pytest.raises(openai.BadRequestError) as info:
                bos_client.completions.create(model=BOS_MODEL, prompt=ids, max_tokens=1)
            assert info.value.body["param"] == "prompt", info.value.body
        # The same added token named in text: the tokenizer matches it inside any text.
        with pytest.raises(openai.BadRequestError) as info:
            bos_client.completions.create(model=BOS_MODEL, prompt="x <|extra0|>",
                                          max_tokens=1)
        assert info.value.body["param"] == "prompt", info.value.body
    else:
        with pytest.raises(openai.BadRequestError) as info:
            bos_client.chat.completions.create(
                model=BOS_MODEL, max_tokens=1,
                messages=[{"role": "user", "content": "x <|extra0|>"}])
        assert info.value.body["param"] == "messages", info.value.body
    # The last id both hold is served, and the engine serves on.
    r = bos_client.completions.create(model=BOS_MODEL, prompt=[5, vocab - 1], max_tokens=2,
                                      extra_body={"stop_token_ids": [vocab - 1]})
    assert r.usage.prompt_tokens == 2 and r.choices[0].finish_reason


def test_a_template_error_names_the_field_that_caused_it(bos_client):
    def fault(messages: list[dict], **kwargs) -> dict:
        with pytest.raises(openai.BadRequestError) as info:
            bos_client.chat.completions.create(
                model=BOS_MODEL, messages=messages, max_tokens=1,
                extra_body={"chat_template_kwargs": kwargs} if kwargs else None)
        assert "could not apply the chat template" in info.value.body["message"]
        return info.value.body

    ok = [{"role": "user", "content": PROMPT}]
    late_system = [*ok, {"role": "system", "content": "Be brief."}]
    # The date a string concatenates; an int breaks the template, the messages are fine.
    assert bos_prompt_tokens(bos_client, True, chat_template_kwargs={"date_string": "1 Jan"}) \
        > bos_prompt_tokens(bos_client, True)
    assert fault(ok, date_string=5)["param"] == "chat_template_kwargs"
    # The messages trip the template whatever the variables say.
    assert fault(late_system)["param"] == "messages"
    assert fault(late_system, date_string="1 Jan")["param"] == "messages"
