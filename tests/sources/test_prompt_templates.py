"""Stored prompt templates at render (`crank.sources.prompt_templates`): one budget for a whole prompt, checked inside
a piece as well as between pieces, costly filters bounded, and the event loop handed back while rendering."""

from __future__ import annotations

import asyncio

import pytest

from crank.exceptions import InvalidParamsError
from crank.sources import prompt_templates
from crank.sources.prompt_templates import MAX_FILTER_INPUT, PromptTemplate, RenderBudget

pytestmark = pytest.mark.anyio
ARGUMENTS = frozenset({"text"})


def _compiled(source: str) -> PromptTemplate:
    return PromptTemplate.compile(source, ARGUMENTS, where="test")


async def test_every_allowed_filter_renders_as_jinja2_renders_it() -> None:
    source = ("{{ text|first }}|{{ text|last }}|{{ text|truncate(9, true, '…', 0) }}|{{ text|title }}|"
              "{{ text|wordcount }}|{{ text|length }}|{{ text|e }}|{{ text|urlencode }}|"
              "{{ text|striptags }}")  # fmt: skip
    text = await _compiled(source).render({"text": "hello <b>big</b> world"}, RenderBudget("p"))
    assert text == ("h|d|hello <b…|Hello <B>big</b> World|5|22|hello &lt;b&gt;big&lt;/b&gt; world|"
                    "hello%20%3Cb%3Ebig%3C/b%3E%20world|hello big world")  # fmt: skip


async def test_a_costly_filter_takes_a_bounded_input_and_a_cheap_one_any() -> None:
    long = "a" * (MAX_FILTER_INPUT + 1)
    with pytest.raises(InvalidParamsError, match=f"the filter 'title' takes at most {MAX_FILTER_INPUT} characters"):
        await _compiled("{{ text|title }}").render({"text": long}, RenderBudget("p"))
    assert await _compiled("{{ text|upper }}").render({"text": long}, RenderBudget("p")) == long.upper()


async def test_one_budget_is_spent_by_every_message_of_a_prompt() -> None:
    budget = RenderBudget("Prompt 'p'", characters=25)
    template = _compiled("{{ text }}")
    assert await template.render({"text": "x" * 10}, budget) == "x" * 10
    assert await template.render({"text": "x" * 10}, budget) == "x" * 10
    with pytest.raises(InvalidParamsError, match="Prompt 'p': the text would be longer than"):
        await template.render({"text": "x" * 10}, budget)  # the third message passes what the prompt may have


class _Counting:
    """A budget whose time is up after its second check."""

    where = "p"

    def __init__(self) -> None:
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        if self.checks > 2:
            raise InvalidParamsError("p: rendering took longer than 0.25 s")

    def spend(self, characters: int) -> None:
        pass


async def test_the_budget_is_checked_before_each_filter_inside_a_piece() -> None:
    budget = _Counting()
    piece = _compiled("{{ " + " ~ ".join(["text|upper"] * 16) + " }}")  # one piece (one expression), sixteen filters
    with pytest.raises(InvalidParamsError, match="rendering took longer than"):
        await piece.render({"text": "x"}, budget)  # type: ignore[arg-type]
    assert budget.checks == 3  # two filters ran and the third was refused: not all sixteen, then the piece's end


async def test_a_render_hands_the_loop_back_between_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prompt_templates, "RENDER_SLICE", 0.0)  # every piece is a slice
    others: list[int] = []

    async def other_request() -> None:
        for n in range(5):
            others.append(n)
            await asyncio.sleep(0)

    template = _compiled("{{ text }} " * 10)
    rendering = asyncio.ensure_future(template.render({"text": "x"}, RenderBudget("p")))
    other = asyncio.ensure_future(other_request())
    await asyncio.sleep(0)
    assert not rendering.done()
    await asyncio.gather(rendering, other)
    assert others == [0, 1, 2, 3, 4]


async def test_one_workspaces_prompts_render_one_at_a_time_within_their_share_of_each_second() -> None:
    from crank.exceptions import RateLimitedError
    from crank.sources.prompt_templates import MAX_RENDER_WAITERS, RENDER_SHARE, RenderGates

    gates = RenderGates()
    mallory, victim = gates.gate("mallory"), gates.gate("victim")
    assert gates.gate("mallory") is mallory and victim is not mallory
    order: list[str] = []

    async def render(name: str, seconds: float) -> None:
        budget = RenderBudget(name)
        async with mallory.turn(budget):
            order.append(f"{name} starts")
            await asyncio.sleep(0)  # another render of the workspace would start here if it could
            budget.spent = seconds
            order.append(f"{name} ends")

    await asyncio.gather(render("a", 0.1), render("b", 0.1))
    assert order == ["a starts", "a ends", "b starts", "b ends"]  # one at a time
    await render("c", 2 * RENDER_SHARE)  # past its share of the second (bursts of twice the share)
    with pytest.raises(RateLimitedError, match="share of rendering time") as refused:
        await render("d", 0.0)
    assert refused.value.retry_after == 1
    async with victim.turn(RenderBudget("v")):  # another workspace's share is its own
        pass
    # No more than MAX_RENDER_WAITERS wait for a turn: past that, refused at once.
    fresh = RenderGates().gate("w")
    hold = asyncio.Event()

    async def holding() -> None:
        async with fresh.turn(RenderBudget("holder")):
            await hold.wait()

    holder = asyncio.ensure_future(holding())
    await asyncio.sleep(0)
    waiters = [asyncio.ensure_future(fresh.turn(RenderBudget(f"w{n}")).__aenter__()) for n in range(MAX_RENDER_WAITERS)]
    await asyncio.sleep(0)
    with pytest.raises(RateLimitedError):
        async with fresh.turn(RenderBudget("one too many")):
            pass
    hold.set()
    await holder
    for waiter in waiters:
        waiter.cancel()
