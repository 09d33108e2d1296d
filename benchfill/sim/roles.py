"""What each simulated model does with a prompt: probes solve, the rewriter rewrites, the judge judges.

Each function returns one reply text per choice. Draws depend only on the world seed,
the model, the prompt, the request seed and the choice index, never on the attempt.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from benchfill.sim import habits, signal, texts
from benchfill.sim.rewriter import SHARE_MAX, anchored_aim, shown_references
from benchfill.sim.world import SimItem, World

# Said, not acted: a prompt that holds none of the world's items gets an answer no reader takes for a real
# model's (a plausible "I am not able to solve this problem." had scored every item of a client's own chat
# template 0% on every probe, without a word)
UNKNOWN_REPLY = ("[benchfill simulated world] This prompt holds none of the simulated benchmark's items, so no "
                 "simulated model answers it: send an item's text, alone, inside <problem> tags, or quoted whole "
                 "in a prompt of your own.")


def prompt_item(world: World, prompt: str, messages: list | None = None) -> SimItem | None:
    """The item a solver prompt asks about: the ``<problem>`` block, else the whole prompt, else (a client's
    own system message or template around it) one message alone, else the longest item text the prompt
    quotes whole."""
    problems = texts.extract_tags(prompt, "problem")
    for problem in problems or [prompt]:
        item = world.items.get(texts.text_key(problem))
        if item is not None:
            return item
    if problems:
        return None
    for message in reversed(messages or []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            item = world.items.get(texts.text_key(content))
            if item is not None:
                return item
    # Quoted whole: one item's text (a one-shot example quotes two: which is asked is not the world's to guess),
    # distinctive (40 characters or more, inside no other item's text), or else a third at least of what the
    # client wrote (a new question may quote a generic stem, "Which of the following is true?", that is an
    # item of its own: not answered as that item)
    asked = next((m.get("content") for m in reversed(messages or []) if isinstance(m, dict)
                  and m.get("role") == "user" and isinstance(m.get("content"), str)), prompt)
    flat, asked_len = " ".join(prompt.split()), len(" ".join(str(asked).split()))
    texts_ = _texts(world)
    quoted = [(text, it) for text, it in texts_ if text in flat]
    whole = [(text, it) for text, it in quoted if not any(text != other and text in other for other, _ in quoted)]
    if len({it.key for _, it in whole}) != 1:
        return None
    text, item = whole[0]
    if 3 * len(text) >= asked_len:
        return item
    distinctive = len(text) >= 40 and not any(text != other and text in other for other, _ in texts_)
    return item if distinctive else None


def prompt_hash(prompt: str) -> str:
    """The key the world draws a request's randomness from: the same prompt, the same draws, wherever it is
    asked (the server, ``sim.direct``, a bench driving the roles)."""
    return hashlib.blake2b(prompt.encode(), digest_size=12).hexdigest()


def _texts(world: World) -> list[tuple[str, SimItem]]:
    """The world's item texts, whitespace-normalised, made once per count of items (a scan of mmlu-pro's
    12,032 normalised them all again for every prompt: 40 ms each)."""
    cached = getattr(world, "_quoted_texts", None)
    if cached is None or cached[0] != len(world.items):
        texts_ = [(" ".join(str(it.fields.get(world.text_field, "")).split()), it) for it in list(world.items.values())]
        cached = (len(world.items), [(t, it) for t, it in texts_ if len(t) >= 20])
        world._quoted_texts = cached  # type: ignore[attr-defined]
    return cached[1]


def solve(world: World, model: str, prompt: str, prompt_hash: str, item: SimItem | None,
          seed: int | None, n: int, max_tokens: int | None = None) -> tuple[list[str], int]:
    """Replies of probe ``model`` and how many were correct (against the item's TRUE answer). A reply cut at
    the request's ``max_tokens`` (``habits.Cut``) is drawn only among wrong replies that make no slip, so the
    count holds for the graded replies too."""
    if item is None:
        return [UNKNOWN_REPLY] * n, 0
    p = world.p_correct(model, item)
    rate = world.reply_habits
    cap = max_tokens or habits.CONTEXT
    replies, n_correct = [], 0
    for i in range(n):
        correct = world.uniform(model, prompt_hash, seed, i) < p
        u = world.uniform("text", model, prompt_hash, seed, i)
        # A wrong reply to an invalid item may be the very slip its stated key encodes (World.p_slip).
        slip = not correct and not item.valid and world.uniform("slip", model, prompt_hash, seed, i) < world.p_slip(model)
        form = habits.pick(rate, world.uniform("habit", model, prompt_hash, seed, i), 4)
        reply = _answer_text(world, item, correct, u, slip, form)
        if not correct and not slip and rate > 0:  # how long it reasons, whatever the cap (a real decode's prefix)
            tokens = habits.reasoning_tokens(rate, world.uniform("cut", model, prompt_hash, seed, i))
            if tokens > habits.LONG:
                reply = habits.long_reply(_draft(world, item), reply, cut=tokens > cap)
        replies.append(reply)
        n_correct += correct
    return replies, n_correct


def _answer_text(world: World, item: SimItem, correct: bool, u: float, slip: bool = False,
                 form: int | None = None) -> str:
    """The reply committing to the right answer, the item's slip or a wrong one, dressed in habit ``form``."""
    ev = world.evaluator
    if ev == "math":
        said = item.stated if slip else item.answer if correct else texts.wrong_math_answer(item.answer, item.stated, u)
        plain = texts.math_response(said, correct and not slip, u)
        return habits.math(plain, said, texts.wrong_math_answer(said, said, (7.0 * u) % 1.0), form)
    if ev == "multiple_choice":
        n_opts = len(item.fields.get(world.options_field) or ()) or 4
        said = item.stated if slip else item.answer if correct else texts.wrong_letter(item.answer, item.stated, n_opts, u)
        # (7u mod 1: another draw in [0, 1) from the same u; 1 - u rounds to 1.0 for u below 6e-17)
        return habits.multiple_choice(texts.mc_response(said), said, texts.wrong_letter(said, said, n_opts, (7.0 * u) % 1.0),
                                      form)
    prompt = str(item.fields[world.text_field])
    entry = str(item.fields.get(world.entry_point_field, "solution"))
    # a slip: the wrong solution the item's tests were written to (if they were)
    body = item.stated if slip else item.answer if correct else texts.wrong_code_body(entry)
    program = f"{prompt.rstrip()}\n{body.rstrip()}"
    return habits.code(texts.code_response(prompt, body), program, entry, form)


def _draft(world: World, item: SimItem) -> str:
    """What a long reasoning drafts on its way: the right answer, named in passing (a reply cut there gives
    none, and one that goes on commits to its own)."""
    if world.evaluator == "math":
        return f"One guess would be \\boxed{{{item.answer}}}, but the constraints need checking."
    if world.evaluator == "multiple_choice":
        return f"Option ({item.answer}) looks plausible, but the others need checking first."
    return (f"A first attempt:\n```python\n{str(item.fields[world.text_field]).rstrip()}\n"
            f"{item.answer.rstrip()}\n```\nThat may miss an edge case.")


# -- rewriter -------------------------------------------------------------------------------------


def rewrite(world: World, prompt: str, prompt_hash: str, seed: int | None, n: int,
            malformed: list[bool]) -> list[str]:
    parent_fields = _json_block(prompt, "parent")
    target = texts.extract_tag(prompt, "target_difficulty")
    if parent_fields is None or world.text_field not in parent_fields or target is None:
        return ["I need a <parent> item (JSON) and a <target_difficulty> to rewrite toward."] * n
    try:
        asked = float(target.strip()) / 10.0
    except ValueError:
        return [f"The target difficulty {target.strip()!r} is not a number."] * n
    parent = world.lookup(str(parent_fields[world.text_field]))
    if parent is None:  # a child another run sharing this world made since it was last read
        world.refresh()
        parent = world.lookup(str(parent_fields[world.text_field]))
    refs = _perceived_references(world, prompt)
    replies = []
    for i in range(n):
        child = make_child(world, parent_fields, parent, asked, world.rng("rewrite", prompt_hash, seed, i), refs)
        if malformed[i]:
            replies.append(texts.malformed_child(json.dumps(child.fields, ensure_ascii=False)))
        else:
            form = habits.pick(world.reply_habits, world.uniform("habit", "rewrite", prompt_hash, seed, i), 4)
            replies.append(habits.child(child.fields, form, latex=world.evaluator != "code"))
    return replies


def _perceived_references(world: World, prompt: str) -> list[tuple[float, float]]:
    """(stated z, perceived z) of the references the prompt shows that the rewriter can read: it
    knows the items it is shown (as a model reads them), so it looks them up to see how it sees them."""
    if world.rewriter.anchor <= 0:
        return []
    out = []
    refreshed = False
    for stated, fields in shown_references(prompt):
        text = str(fields.get(world.text_field, ""))
        item = world.lookup(text)
        if item is None and not refreshed:  # as for the parent: another run's child, read once more
            world.refresh()
            refreshed, item = True, world.lookup(text)
        if item is not None:
            out.append((stated, world.perceived_z(item)))
    return out


def make_child(world: World, fields: dict[str, Any], parent: SimItem | None, asked: float,
               rng: random.Random, refs: list[tuple[float, float]] | None = None) -> SimItem:
    """The child's true difficulty from what the rewriter perceives (docs/sim-rewriter.md).

    aim = the asked number read on the rewriter's distorted scale, pulled toward its perception of
    the references that bracket it; the child moves a share of the perceived distance from the
    parent, then noise and drift on the logit scale. The kind preset reduces this to
    z_child = z_parent + 0.7 (z_target - z_parent) + N(0, 0.35 logits)."""
    m = world.rewriter
    aim, _weight = anchored_aim(m, asked, refs or [])
    if parent is not None:
        z_parent = world.to_z(parent.difficulty)
        seen_parent = world.perceived_z(parent)
    else:  # a parent the world never made: the rewriter has nothing but the ask to go on
        z_parent, seen_parent = 0.5, aim
    move = aim - seen_parent
    # (a draw only where there is a spread, so the kind preset keeps the first world's stream)
    share = max(0.0, min(SHARE_MAX, m.share + m.share_sd * rng.gauss(0.0, 1.0))) if m.share_sd else m.share
    spread = m.noise
    if move < 0:  # making an item easier is the less reliable direction
        share *= m.easier_share
        spread *= m.easier_noise
    z_meant = m.unperceive(m.perceive(z_parent) + share * move)
    b = world.from_z(z_meant) + m.drift + spread * rng.gauss(0.0, 1.0)
    p_invalid = min(m.invalid_max, m.invalid_base + m.invalid_slope * abs(move))
    valid = rng.random() >= p_invalid
    # The prompt shows the parent's stated answer, not its true one: a wrong key is carried into the
    # child unless the rewriter re-solves the item (the draw only there, so other children's streams stay).
    inherited = (parent is not None and not parent.valid and m.inherit_invalid > 0
                 and rng.random() < m.inherit_invalid)
    valid = valid and not inherited
    child = dict(fields)
    for stale in ("solution", "url", "answer_index"):  # they describe the parent, not the child
        child.pop(stale, None)
    tf, af = world.text_field, world.answer_field
    parent_text = signal.unmark(str(fields[tf])) if world.text_signal > 0 else str(fields[tf])
    u = rng.random()
    if world.evaluator == "math":
        child[tf] = texts.rewrite_text(parent_text, rng)
        true = str(rng.randint(0, 999))
        stated = true if valid else texts.wrong_math_answer(true, true, u)
    elif world.evaluator == "multiple_choice":
        child[tf] = texts.rewrite_text(parent_text, rng)
        opts = list(fields.get(world.options_field) or [])
        true_letter = parent.answer if parent is not None else str(fields.get(af, "A"))
        order = list(range(len(opts)))
        rng.shuffle(order)
        child[world.options_field] = [opts[k] for k in order]
        old = texts.letters(len(opts)).find(true_letter)
        true = texts.letters(len(opts))[order.index(old)] if old >= 0 else true_letter
        wrong = texts.letters(len(opts)).find(parent.stated) if inherited and parent is not None else -1
        if wrong >= 0:  # the parent's wrong option, wherever the shuffle put it
            stated = texts.letters(len(opts))[order.index(wrong)]
        else:
            stated = true if valid else texts.wrong_letter(true, true, len(opts), u)
    else:
        child[tf] = texts.rewrite_docstring(parent_text, rng)
        # from the parent's true solution and its tests before any invalid child's checks (the shown parent
        # may be an invalid child: its stated solution wrong, its tests wrapped), as multiple choice takes the
        # parent's true letter
        true = stated = parent.answer if parent is not None else str(fields.get(af, ""))
        tests = texts.unwrapped_tests(str(fields.get(world.tests_field, "")))
        if world.tests_field in fields:
            child[world.tests_field] = tests
        # An invalid child's tests fail its own solution, or (a share tests_agree of them) were written to
        # it, so that only a judge, not running the solution, can catch it. The draw only where both happen.
        agree = not valid and (m.tests_agree >= 1 or (m.tests_agree > 0 and rng.random() < m.tests_agree))
        if agree:
            stated, suffix = texts.agreeing_code(true, str(fields.get(world.entry_point_field, "solution")))
            child[world.tests_field] = tests.rstrip() + suffix
        elif not valid:
            child[world.tests_field] = texts.invalid_code_test(tests)
    child[af] = stated
    child[tf] = world.with_signal(str(child[tf]), b)  # its own truth's sentences (none without a signal)
    parent_id = parent.id if parent is not None else str(fields.get("id", "unknown"))
    tag = f"{rng.getrandbits(32):08x}"
    if "id" in child:
        child["id"] = f"{parent_id}-sim{tag}"
    # Every rewrite request writes its own words: the simulated phrasings are few (a lead and a tail
    # sentence), and children of one parent in the same words would share one truth, the first
    # arrival's, so a child's truth would hang on the order requests reached the world (gap searches
    # in other processes reach it in another order). A real rewriter asked for other difficulties
    # does not write the same item twice. The same request again (a retry, a resumed run) draws the
    # same tag and finds its own child.
    code = world.evaluator not in ("math", "multiple_choice")
    child[tf] = _variant(str(child[tf]), tag, code)
    key = texts.text_key(str(child[tf]))
    while key in world.items and (world.items[key].parent != parent_id or world.items[key].difficulty != b):
        child[tf] = _variant(str(child[tf]), tag, code)  # a 32-bit tag drawn twice: still distinct
        key = texts.text_key(str(child[tf]))
    chance = parent.chance if parent is not None else world._chance(child)
    item = SimItem(key, str(child.get("id", f"{parent_id}-sim{tag}")), child, b, chance, true, stated,
                   valid, parent_id, "generated")
    return world.register_child(item)


def _variant(text: str, tag: str, code: bool) -> str:
    """The text marked as this request's own: a comment line above a program (the prompt must stay
    code the completion continues), a closing note on a question."""
    return f"# Variant {tag}.\n{text}" if code else f"{text} (Variant {tag}.)"


# -- judge ----------------------------------------------------------------------------------------


def judge(world: World, prompt: str, prompt_hash: str, seed: int | None, n: int) -> list[str]:
    fields = _json_block(prompt, "item")
    item = None
    if fields is not None and world.text_field in fields:
        item = world.lookup(str(fields[world.text_field]))
    valid = item.valid if item is not None else True  # an item the world never made: nothing to catch
    replies = []
    for i in range(n):
        u = world.uniform("judge", prompt_hash, seed, i)
        says_invalid = u < (world.judge_recall if not valid else world.judge_fpr)
        u_reason = world.uniform("reason", prompt_hash, seed, i)
        form = habits.pick(world.reply_habits, world.uniform("habit", "judge", prompt_hash, seed, i), 4)
        replies.append(habits.verdict(texts.judge_reply(not says_invalid, u_reason), not says_invalid,
                                      texts.judge_reason(not says_invalid, u_reason), form))
    return replies


def _json_block(prompt: str, tag: str) -> dict[str, Any] | None:
    for raw in texts.extract_tags(prompt, tag):  # the shortest reading that is a JSON object
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return None
