"""A published agent's resources and prompts: its documents, its GET operations read as resources, and its stored
prompt templates, as the MCP core's `Resource`, `ResourceTemplate` and `Prompt`.

- A document is a `Resource` whose reader answers its text or bytes.
- A tool whose binding says `resource` is a `ResourceTemplate` (or a `Resource`, when its URI has no variables)
  that the tool answers (`tool=`): the MCP core runs it through its whole pipeline with the URI's variables as
  its arguments. Completions come from the `enum` of each variable's schema.
- A stored prompt renders each message's template in the sandbox of `crank.sources.prompt_templates`; a message
  may embed one of the agent's documents by URI, or an image. Completions come from each argument's `enum`,
  which also limits its values.

Documents and prompts share the translation layer with tools, keyed by name, so their names must differ from
every tool's, discovery mode's three included (a template takes its tool's name, and so its texts).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crank.exceptions import ConfigurationError, InvalidParamsError
from crank.gateway.mapping import InputMapping
from crank.mcp.completions import Completer
from crank.mcp.prompts import Prompt, PromptArgument, PromptMessage, PromptResult
from crank.mcp.resources import Resource, ResourceContents, ResourceTemplate
from crank.mcp.tools import CallContext
from crank.registry.runtime import AgentDocument, AgentPrompt, PromptMessageSpec, RuntimeTool, RuntimeView
from crank.sources import discovery
from crank.sources.prompt_templates import PromptTemplate, RenderBudget, RenderGate, RenderGates
from crank.types import JSONObject

__all__ = ["AgentSurface", "agent_surface"]

URI_SCHEME = "crank"
"""The scheme of the URIs Crank makes up for an agent's GET operations: `crank://{workspace}/{agent}/{tool}/…`."""


@dataclass(slots=True)
class AgentSurface:
    resources: list[Resource] = field(default_factory=list)
    templates: list[ResourceTemplate] = field(default_factory=list)
    prompts: list[Prompt] = field(default_factory=list)
    texts: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    """Translations of documents and prompts: language -> name -> {title, description}."""


def agent_surface(runtime: RuntimeView, renders: RenderGates | None = None) -> AgentSurface:
    """The resources, templates and prompts of one agent version; `ConfigurationError` naming what is wrong.
    `renders`: the process's turns at rendering per workspace (a gate of its own for this version when None)."""
    surface = AgentSurface()
    where = f"agent {runtime.workspace.slug}/{runtime.agent.slug}"
    tools = {tool.tool_name for tool in runtime.tools} | discovery.TOOL_NAMES  # whatever the mode: it can change
    named: set[str] = set()
    items: list[AgentDocument | AgentPrompt] = [*runtime.agent.documents, *runtime.agent.prompts]
    for item in items:
        kind = "document" if isinstance(item, AgentDocument) else "prompt"
        if item.name in tools or item.name in named:
            raise ConfigurationError(f"{where}: {kind} {item.name!r}: its name is taken by a tool, document or prompt")
        named.add(item.name)
        for language, texts in item.translations.items():
            surface.texts.setdefault(language, {})[item.name] = dict(texts)
    documents = {document.uri: document for document in runtime.agent.documents}
    surface.resources.extend(_document(document) for document in runtime.agent.documents)
    for spec in runtime.tools:
        if spec.resource is not None:
            _tool_resource(spec, runtime, surface, where)
    gate = (renders or RenderGates()).gate(runtime.workspace.slug)
    surface.prompts.extend(_prompt(prompt, documents, where, gate) for prompt in runtime.agent.prompts)
    return surface


# -- documents -------------------------------------------------------------------------------------------


def _document(document: AgentDocument) -> Resource:
    body: str | bytes = document.text if document.text is not None else base64.b64decode(document.blob or "")

    async def read(context: CallContext) -> str | bytes:
        return body

    return Resource(uri=document.uri, name=document.name, reader=read, title=document.title,
                    description=document.description, mime_type=document.mime_type, size=len(body))  # fmt: skip


def _embedded(document: AgentDocument) -> JSONObject:
    """A document as a prompt message's `resource` content."""
    body = document.text if document.text is not None else base64.b64decode(document.blob or "")
    contents = ResourceContents(document.uri, text=body, mime_type=document.mime_type) if isinstance(body, str) \
        else ResourceContents(document.uri, blob=body, mime_type=document.mime_type)  # fmt: skip
    return {"type": "resource", "resource": contents.to_wire()}


# -- GET operations --------------------------------------------------------------------------------------


def _tool_resource(spec: RuntimeTool, runtime: RuntimeView, surface: AgentSurface, where: str) -> None:
    assert spec.resource is not None
    name, schema = spec.tool_name, spec.input_schema or {}
    declared = schema.get("properties")
    properties: dict[str, Any] = declared if isinstance(declared, dict) else {}
    uri_template = spec.resource.uri_template or _default_template(spec, runtime, list(properties))
    probe = ResourceTemplate(uri_template, name, tool=name)
    variables = probe.variables
    at = f"{where}, tool {name!r}: resource"
    unknown = [variable for variable in variables if variable not in properties]
    if unknown:
        raise ConfigurationError(f"{at}: {uri_template!r} has variables that are not arguments: {unknown}")
    listed = schema.get("required")
    required: list[Any] = listed if isinstance(listed, list) else []
    missing = [argument for argument in required if argument not in variables]
    if missing:
        raise ConfigurationError(
            f"{at}: the required arguments {missing} are not variables of {uri_template!r}; only a GET operation "
            "whose required arguments are all in its URI can be read as a resource"
        )
    title, description, mime_type = spec.title, spec.tool_description, spec.resource.mime_type
    if not variables:  # a GET with no path parameter: one fixed resource
        surface.resources.append(Resource(uri_template, name, tool=name, title=title, description=description,
                                          mime_type=mime_type))  # fmt: skip
        return
    enums = {variable: _enum_of(properties[variable]) for variable in variables}
    completions: dict[str, Completer] = {variable: values for variable, values in enums.items() if values}
    surface.templates.append(ResourceTemplate(uri_template, name, tool=name, title=title, description=description,
                                              mime_type=mime_type, completions=completions))  # fmt: skip


def _default_template(spec: RuntimeTool, runtime: RuntimeView, declared: list[str]) -> str:
    """`crank://{workspace}/{agent}/{tool}` and one `/{argument}` per path parameter of the URL, in order."""
    mapping = InputMapping.compile(spec.input_mapping, spec.http_method, spec.target.url, where=spec.tool_name)
    path = "".join(f"/{{{argument}}}" for argument in mapping.path_arguments(declared))
    return f"{URI_SCHEME}://{runtime.workspace.slug}/{runtime.agent.slug}/{spec.tool_name}{path}"


def _enum_of(schema: Any) -> tuple[str, ...]:
    values = schema.get("enum") if isinstance(schema, dict) else None
    return tuple(str(value) for value in values) if isinstance(values, list) else ()


# -- prompts ---------------------------------------------------------------------------------------------


def _prompt(prompt: AgentPrompt, documents: Mapping[str, AgentDocument], where: str, gate: RenderGate) -> Prompt:
    at = f"{where}, prompt {prompt.name!r}"
    names = frozenset(argument.name for argument in prompt.arguments)
    compiled = []
    for index, message in enumerate(prompt.messages):
        source = message.text if message.text is not None else message.resource
        template = (
            PromptTemplate.compile(source, names, where=f"{at}, messages[{index}]") if source is not None else None
        )
        compiled.append((message, template))
    limits = {argument.name: frozenset(argument.enum) for argument in prompt.arguments if argument.enum}

    async def render(arguments: Mapping[str, str], context: CallContext) -> PromptResult:
        for argument, allowed in limits.items():
            if argument in arguments and arguments[argument] not in allowed:
                raise InvalidParamsError(f"Prompt {prompt.name!r}: {argument!r} must be one of its listed values")
        budget = RenderBudget(f"Prompt {prompt.name!r}")  # one for the whole prompt, every message together
        async with gate.turn(budget):  # the workspace's turn: one prompt at a time, a share of each second
            messages = [await _message(message, template, arguments, budget) for message, template in compiled]
        return PromptResult(messages, description=prompt.description)

    async def _message(message: PromptMessageSpec, template: PromptTemplate | None, arguments: Mapping[str, str],
                       budget: RenderBudget) -> PromptMessage:  # fmt: skip
        if message.image is not None:
            content: JSONObject = {"type": "image", "data": message.image.data, "mimeType": message.image.mime_type}
        elif message.resource is not None:
            assert template is not None
            uri = await template.render(arguments, budget)
            document = documents.get(uri)
            if document is None:
                raise InvalidParamsError(f"Prompt {prompt.name!r}: {uri[:200]!r} is not a document of this agent")
            content = _embedded(document)
        else:
            assert template is not None
            content = {"type": "text", "text": await template.render(arguments, budget)}
        return PromptMessage(message.role, content)

    arguments = tuple(
        PromptArgument(
            argument.name, argument.description, argument.required, argument.title, completions=argument.enum
        )  # fmt: skip
        for argument in prompt.arguments
    )
    return Prompt(prompt.name, render, title=prompt.title, description=prompt.description, arguments=arguments)
