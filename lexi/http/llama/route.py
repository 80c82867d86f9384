"""llama.cpp's helper routes: POST /tokenize, /detokenize and /apply-template, in its request shapes."""

from __future__ import annotations

from lexi.http.chat.request import parse_chat_request
from lexi.http.exchange import Reply
from lexi.http.generation.turn import chat_turn
from lexi.http.parsing.fields import Fields, refuse_unknown
from lexi.http.route import Route


class TokenizeRoute(Route):
    route = "tokenize"

    def post(self) -> Reply:
        body = self.json_body()
        refuse_unknown(body, ("content", "add_special", "parse_special", "with_pieces"))
        f = Fields(body)
        content = f.string("content")
        if content is None:
            f.fail("content", "is required")
        tokenizer = self.state.runtime.tokenizer
        add_bos = f.boolean("add_special") and bool(tokenizer.add_bos)
        ids = tokenizer.encode(content, add_bos=add_bos, special=f.boolean("parse_special", True))
        if f.boolean("with_pieces"):
            return self.json({"tokens": [{"id": i, "piece": _piece(tokenizer.token_bytes(i))} for i in ids]})
        return self.json({"tokens": ids})


def _piece(data: bytes) -> str | list[int]:
    """A token's text, or its byte values when it holds part of a UTF-8 character (as llama.cpp answers):
    replacing them with U+FFFD would lose what the token is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


class DetokenizeRoute(Route):
    route = "detokenize"

    def post(self) -> Reply:
        body = self.json_body()
        refuse_unknown(body, ("tokens",))
        f = Fields(body)
        tokens = f.array("tokens") or []
        vocab = self.state.runtime.tokenizer.vocab_size
        if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab for t in tokens):
            f.fail("tokens", f"must be an array of token ids in [0, {vocab})")
        return self.json({"content": self.state.runtime.tokenizer.decode(tokens)})


class ApplyTemplateRoute(Route):
    """The prompt a chat request would be given, without generating (a chat body is accepted as is)."""

    route = "apply_template"

    def post(self) -> Reply:
        req = parse_chat_request(self.json_body(), self.state.sampling)
        self.state.names.resolve(req.model)  # a model this server does not serve is the 400 chat would give
        turn = chat_turn(self.state, req.conversation)
        return self.json({"prompt": turn.prompt.text})
