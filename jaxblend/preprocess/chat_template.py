"""A Hugging Face tokenizer's own chat template, read from its files and rendered offline.

A model directory carries its chat template either in ``tokenizer_config.json`` (key
``chat_template``: a Jinja string, or a list of ``{"name", "template"}`` of which ``default`` is
used) or in a file ``chat_template.jinja`` beside it (which then wins, as it does when the
directory is loaded by ``transformers``). `load_chat_template` finds it; `ChatTemplate.render`
renders a conversation to text with Jinja2 in a sandbox, with the settings chat templates are
written for: blocks trimmed (``trim_blocks``, ``lstrip_blocks``), ``{% break %}``/``{% continue %}``,
``raise_exception(message)``, ``strftime_now(format)``, a ``tojson`` filter that keeps non-ASCII
text, and the special tokens named by the directory's JSON (``bos_token``, ``eos_token``, ...) as
variables. A ``{% generation %}...{% endgeneration %}`` block (templates written for assistant
masks) renders its body unchanged.

Nothing is downloaded and ``transformers`` is not needed.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from jaxblend.preprocess.tokenizer_spec import TokenizerError, named_tokens, read_json_object

TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"


class ChatTemplateError(ValueError):
    """A conversation cannot be rendered by the template (the template raised or failed)."""


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """A chat template and the special-token strings its directory names.

    Attributes:
      source: the Jinja source of the template.
      path: the file it was read from (``tokenizer_config.json`` or ``chat_template.jinja``).
      special_tokens: ``{"bos_token": "<s>", "eos_token": "</s>", ...}``, passed to the template.
    """

    source: str
    path: str
    special_tokens: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def sha256(self) -> str:
        """The SHA-256 of the template source (recorded in the run settings)."""
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> str:
        """The text of ``messages`` as the template writes it.

        Args:
          messages: the conversation, ``[{"role": ..., "content": ...}, ...]``.
          add_generation_prompt: end with the prompt that opens an assistant turn.

        Raises:
          ChatTemplateError: the template raised (``raise_exception``) or failed on this input.
        """
        import jinja2

        try:
            return _compiled(self.source).render(
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
                tools=None,
                documents=None,
                **self.special_tokens,
            )
        except _TemplateRaised as e:
            raise ChatTemplateError(f"the chat template refused it: {e}") from None
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError) as e:
            raise ChatTemplateError(f"the chat template failed: {type(e).__name__}: {e}") from None


class _TemplateRaised(Exception):
    """``raise_exception(message)`` called by a template."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators=None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


@functools.cache
def _compiled(source: str):
    """The compiled Jinja template of ``source`` (once per process)."""
    import jinja2
    from jinja2 import ext, nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(ext.Extension):
        """``{% generation %}body{% endgeneration %}``: renders ``body`` unchanged."""

        tags: ClassVar[set[str]] = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise TokenizerError(f"the chat template does not parse: {e}") from None


def load_chat_template(tokenizer_file: str) -> ChatTemplate:
    """The chat template of the Hugging Face model directory holding ``tokenizer_file``.

    Args:
      tokenizer_file: the ``tokenizer.json`` (its directory is searched).

    Raises:
      TokenizerError: the directory has no chat template (names the files looked at), or it does
        not parse.
    """
    directory = os.path.dirname(os.path.abspath(tokenizer_file))
    jinja_path = os.path.join(directory, TEMPLATE_FILE)
    config_path = os.path.join(directory, CONFIG_FILE)
    source, path = None, None
    if os.path.isfile(jinja_path):
        with open(jinja_path, encoding="utf-8") as f:
            source, path = f.read(), jinja_path
    elif os.path.isfile(config_path):
        value = read_json_object(config_path).get("chat_template")
        if isinstance(value, list):
            named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
            value = named.get("default")
        if isinstance(value, str):
            source, path = value, config_path
    if source is None:
        raise TokenizerError(
            f"--chat: the tokenizer directory {directory} has no chat template (neither "
            f"{TEMPLATE_FILE} nor a 'chat_template' in {CONFIG_FILE}); use the model's own "
            "tokenizer directory"
        )
    _compiled(source)  # a template that does not parse fails here, before any work
    return ChatTemplate(source, path, named_tokens(directory))
