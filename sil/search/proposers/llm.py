"""The LLM mutator: asks the contract's `mutator` model for one evidence-backed mutation.

The prompt is the contract's versioned template (`templates/<name>.md`, hashed into
the contract) filled with the programme, the allowed surfaces with their schemas and the
champion's content, the champion's recent audit evidence and this arm's history
(`sil/search/evidence.py`). The model answers through one tool call, `propose_mutation`; its
arguments go through `parse_mutation` (every hyperparameter and measurement guard applies),
then through this proposer's own checks: every evidence item cites this run's evidence, no
tried edit is repeated (normalised value), at most `axis_guard` consecutive candidates on
one surface.path, and the edit applies to the champion. An output that fails is sent back
with the error, at most `max_retries` times; then the proposal is a gap. Before each call
the worst-case cost is asked of the run's USD budget, and every call goes through a call
journal (`sil/exec/modelcalls.py`): a run resumed after a crash replays a saved answer instead of paying
for it again, and charges the bound of a call whose answer was lost.

Any inspect-ai model name works (`anthropic/...`, `openai/...`; the key comes from the env var
the contract names); `scripted/mutator` is the deterministic offline model.

    proposer = LLMProposer(loaded_contract)
    proposal = proposer.propose(ProposalRequest(..., context=build_context(...)))
"""

from __future__ import annotations

import hashlib
import json
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sil.base.errors import Halt
from sil.contract.schema import LoadedContract, template_path
from sil.exec import localprobe
from sil.exec.modelcalls import CallJournal, CallKey, WallTimeReached, role_model, run_bounded, trusted_tokens
from sil.policies.mutation import MutationError, apply_mutation, mutation_id_for, parse_mutation
from sil.search.evidence import MutatorContext, check_citation, norm_hash
from sil.search.proposers.base import MutatorCall, Proposal, ProposalRequest, ProposerBase
from sil_policy import SURFACES
from sil_policy.credentials import redact_data, redact_text

if TYPE_CHECKING:
    from inspect_ai.tool import ToolCall

TOOL_NAME = "propose_mutation"
NO_PROPOSAL = "NO_PROPOSAL"  # the model's answer when the evidence supports no further change
CHARS_PER_TOKEN_BOUND = 3  # worst-case bound: real tokenizers average about 4 characters
RETRY_OVERHEAD_TOKENS = 800  # the previous answer and the error sent back, per retry
LOST_CALL = "{n} call(s) made before a crash, output never saved: charged the worst-case bound"
MODEL_FIELDS = ("surface", "path", "value", "hypothesis", "evidence", "expected_effect", "rollback_condition")


def worst_case_cost(contract: Any) -> tuple[int, float]:
    """(calls, USD) the mutator could spend at most in this contract's run: priced, bounded.

    Every candidate costs at least one paired round (2 audits) of a candidate arm, each
    proposal may be preceded by max_consecutive_gaps - 1 gaps, and each attempt makes at most
    max_retries + 1 calls of a full-size prompt and a full-size answer.
    """
    role, m = contract.models.mutator, contract.mutator
    if contract.models.mutator.model == "offline/catalogue":
        return 0, 0.0
    candidates = sum(n for arm, n in contract.budget.arm_audits.items() if arm != "never") // 2
    calls = candidates * contract.stop.max_consecutive_gaps * (m.max_retries + 1)
    tokens_in = m.max_prompt_chars // CHARS_PER_TOKEN_BOUND + 1 + m.max_retries * RETRY_OVERHEAD_TOKENS
    p = role.price
    per_call = 0.0 if p is None else (tokens_in * p.input_per_mtok + m.max_output_tokens * p.output_per_mtok) / 1e6
    return calls, calls * per_call


def redacted_output(output: Any) -> Any:
    """The model's answer with every credential in its text and tool arguments redacted."""
    from inspect_ai.model import ModelOutput

    return ModelOutput.model_validate(redact_data(output.model_dump(mode="json")))


TOO_LONG = (
    "the mutator's answer was cut for length (its prompt and answer exceed the model's context, or "
    "mutator.max_output_tokens): give the model more context (a local server's --n-ctx) or lower "
    "mutator.max_prompt_chars"
)


class Rejected(Exception):
    """The model's output is not a usable mutation; the message goes back to the model."""


def tool_info() -> Any:
    """The structured output: one `propose_mutation` call with the mutation's fields."""
    from inspect_ai.tool import ToolInfo, ToolParam, ToolParams

    text = ToolParam(type="string")
    value = ToolParam(anyOf=[ToolParam(type="string"), ToolParam(type="boolean"), ToolParam(type="array", items=text)])
    params = {
        "surface": ToolParam(type="string", description="one allowed policy surface", enum=list(SURFACES)),
        "path": ToolParam(type="string", description="dotted path inside the surface"),
        "value": value,
        "hypothesis": ToolParam(type="string"),
        "evidence": ToolParam(type="array", items=text, description="each item starts with a citation"),
        "expected_effect": ToolParam(type="object", additionalProperties=ToolParam(type="number")),
        "rollback_condition": ToolParam(type="string"),
    }
    return ToolInfo(
        name=TOOL_NAME,
        description="Propose exactly one policy mutation.",
        parameters=ToolParams(properties=params, required=list(MODEL_FIELDS)),
    )


def render_prompt(loaded: LoadedContract, champion: dict[str, dict[str, Any]], ctx: MutatorContext) -> str:
    """The filled template, cut to `max_prompt_chars` by dropping the oldest audits (one is always
    kept), then the oldest tried edits; each cut is stated in the prompt."""
    c = loaded.contract
    template = string.Template(template_path(c.mutator.template).read_text(encoding="utf-8"))
    allowed = [s for s in SURFACES if s in c.search_space.surfaces]
    schemas = {s: SURFACES[s].schema.model_json_schema() for s in allowed}
    audits, history, notes = list(ctx.audits), list(ctx.history), list(ctx.truncated)
    while True:
        text = template.substitute(
            axis_guard=c.mutator.axis_guard,
            programme=loaded.programme,
            targets=", ".join(ctx.target_dimensions),
            critical=", ".join(ctx.critical_dimensions) or "none",
            auxiliary=", ".join(ctx.auxiliary_dimensions) or "none",
            surfaces=json.dumps(schemas, sort_keys=True),
            champion=json.dumps({s: champion[s] for s in allowed if s in champion}, sort_keys=True, indent=1),
            evidence=json.dumps([a.model_dump(mode="json", exclude_none=True) for a in audits], separators=(",", ":")),
            history=json.dumps([h.model_dump(mode="json") for h in history], separators=(",", ":")),
            truncated="; ".join(notes) or "none",
        )
        if len(text) <= c.mutator.max_prompt_chars or (len(audits) <= 1 and not history):
            return text
        if len(audits) > 1:
            audits.pop()  # the oldest audit shown
            notes = [*ctx.truncated, f"prompt size: kept the {len(audits)} most recent audits"]
        else:
            history.pop(0)
            notes = [*ctx.truncated, f"prompt size: kept the {len(history)} most recent tried edits"]


class LLMProposer(ProposerBase):
    """One mutation per request from an inspect-ai model, checked before any audit."""

    reads_evidence = True

    def __init__(self, loaded: LoadedContract, model: Any = None) -> None:
        self.loaded = loaded
        self.role = loaded.contract.models.mutator
        self.settings = loaded.contract.mutator
        self.name = f"mutator:{self.role.model}"
        self._model = model  # an inspect Model (tests); else resolved by name on first use

    # ---- cost ------------------------------------------------------------------------------

    def price(self, tokens_in: int, tokens_out: int) -> float:
        p = self.role.price
        return 0.0 if p is None else (tokens_in * p.input_per_mtok + tokens_out * p.output_per_mtok) / 1e6

    def bound(self, prompt: str, call: int) -> float:
        tokens_in = len(prompt) // CHARS_PER_TOKEN_BOUND + 1 + call * RETRY_OVERHEAD_TOKENS
        return self.price(tokens_in, self.settings.max_output_tokens)

    # ---- the model -------------------------------------------------------------------------

    def model(self) -> Any:
        if self._model is None:
            self._model = role_model(self.role, max_tokens=self.settings.max_output_tokens)
        return self._model

    def generate(self, messages: list[Any], wall_left: float | None = None) -> Any:
        """One call, the tool asked for by name (a local server answers tool_choice "required"
        with HTTP 500), abandoned when the run's wall-time budget runs out (WallTimeReached)."""
        from inspect_ai.tool import ToolFunction

        call = self.model().generate(messages, tools=[tool_info()], tool_choice=ToolFunction(name=TOOL_NAME))
        return run_bounded(call, wall_left, "mutator")

    # ---- propose ---------------------------------------------------------------------------

    def propose(self, request: ProposalRequest) -> Proposal:
        from inspect_ai.model import ChatMessageTool, ChatMessageUser

        ctx = request.context
        if not isinstance(ctx, MutatorContext):
            return Proposal(gap="the LLM mutator needs the run's evidence (no MutatorContext was given)")
        # the evidence quotes model outputs: no credential in them is sent on (the programme and
        # the policies were refused with one at `sil check`)
        prompt = redact_text(render_prompt(self.loaded, request.champion, ctx), assignments=False)
        messages: list[Any] = [ChatMessageUser(content=prompt)]
        calls: list[MutatorCall] = []
        error = "no call made"
        for n in range(self.settings.max_retries + 1):
            bound = self.bound(prompt, n)
            prompt_sha = hashlib.sha256("\n\n".join(m.text for m in messages).encode()).hexdigest()
            output, stopped = self.paid_output(
                messages, CallKey(request.arm, request.index, request.attempt, n, prompt_sha), bound, calls, request
            )
            if stopped is not None:
                return stopped
            record, tool_call = self.record(output, prompt_sha, request, n, bound)
            if tool_call is None and output.message.text.strip().startswith(NO_PROPOSAL):
                return Proposal(calls=[*calls, record])  # nothing left to try
            if tool_call is None and output.stop_reason == "model_length":  # a retry's longer prompt fits worse
                why = f"{TOO_LONG}: {output.message.text.strip()[:300]}"
                return Proposal(calls=[*calls, record.model_copy(update={"error": why})], gap=why)
            try:
                mutation = self.check(tool_call, request, ctx)
            except Rejected as ex:
                error = str(ex)
                calls.append(record.model_copy(update={"error": error[:1000]}))
                messages.append(output.message)
                if tool_call is not None:
                    messages.append(ChatMessageTool(content=f"Rejected: {error}", tool_call_id=tool_call.id))
                else:
                    messages.append(ChatMessageUser(content=f"Rejected: {error}. Call {TOOL_NAME} once."))
                continue
            calls.append(record)
            return Proposal(mutation=mutation, calls=calls)
        return Proposal(calls=calls, gap=f"{len(calls)} invalid mutator outputs; last: {error[:300]}")

    def paid_output(
        self, messages: list[Any], key: CallKey, bound: float, calls: list[MutatorCall], request: ProposalRequest
    ) -> tuple[Any, Proposal | None]:
        """The model's answer (replayed if a crash interrupted the run after it was paid), or a stop/gap."""
        from inspect_ai.model import ModelOutput

        journal = CallJournal(request.work_dir, key)
        lost = journal.lost(ModelOutput)
        if lost.calls:
            note = LOST_CALL.format(n=lost.calls)
            calls.append(MutatorCall(model=self.role.model, prompt_sha256=key.prompt_sha256, usd=lost.usd, error=note))
        output = journal.replay(ModelOutput)
        if output is not None:
            return redacted_output(output), None  # a journal an older version wrote may hold one
        if why := request.spend(bound + sum(c.usd for c in calls)):
            return None, Proposal(calls=calls, stop=f"mutator call not made: {why}")
        journal.begin(bound, lost)
        try:
            output = self.generate(messages, request.wall_left())
        except WallTimeReached as ex:  # the run's own limit, not the model's failure: halt
            raise Halt(str(ex)) from None
        except Exception as ex:  # provider errors: a recorded gap, never a crash of the run
            why = redact_text(str(ex))  # a provider's error may quote the key it was given
            if down := localprobe.role_down("mutator", self.role):  # a dead server says nothing of proposals
                raise localprobe.ServerDown(
                    f"{down}. A mutator call failed meanwhile ({why[:200]}): start the server, "
                    "then run the same `sil run` command again"
                ) from None
            calls.append(
                MutatorCall(model=self.role.model, prompt_sha256=key.prompt_sha256, usd=bound, error=why[:300])
            )
            return None, Proposal(calls=calls, gap=f"mutator model call failed: {why[:200]}")
        # stored and replayed redacted: a credential the model wrote is kept nowhere (the mutation
        # that held it is refused by parse_mutation, fresh or replayed)
        output = redacted_output(output)
        journal.finish(output.model_dump_json())
        return output, None

    def record(
        self, output: Any, prompt_sha: str, request: ProposalRequest, n: int, bound: float
    ) -> tuple[MutatorCall, ToolCall | None]:
        """The call's record (tokens, cost, raw output kept in the run directory) and its tool call."""
        tool_calls = [c for c in (output.message.tool_calls or []) if c.function == TOOL_NAME]
        raw = json.dumps(
            {
                "text": output.message.text,
                "tool_calls": [
                    {"function": c.function, "arguments": c.arguments} for c in output.message.tool_calls or []
                ],
            },
            sort_keys=True,
            ensure_ascii=False,
        )
        out_sha = hashlib.sha256(raw.encode()).hexdigest()
        rel = None
        if request.work_dir is not None:
            request.work_dir.mkdir(parents=True, exist_ok=True)
            name = f"{request.arm or 'arm'}-c{request.index:03d}-{out_sha[:12]}.json"
            (request.work_dir / name).write_text(raw, encoding="utf-8")
            rel = str(Path(request.work_dir.name) / name)
        tokens = trusted_tokens(output.usage)
        t_in, t_out = tokens or (0, 0)
        usd = self.price(t_in, t_out) if tokens else bound  # unknown or bad usage is charged its bound
        call = MutatorCall(
            model=self.role.model,
            prompt_sha256=prompt_sha,
            input_tokens=t_in,
            output_tokens=t_out,
            usd=round(usd, 6),
            output_sha256=out_sha,
            output_file=rel,
        )
        return call, (tool_calls[0] if len(tool_calls) == 1 else None)

    def check(self, tool_call: Any, request: ProposalRequest, ctx: MutatorContext) -> Any:
        """The mutation the tool call describes, or Rejected with what is wrong."""
        if tool_call is None:
            raise Rejected(f"answer with exactly one call of the tool {TOOL_NAME}")
        args = tool_call.arguments if isinstance(tool_call.arguments, dict) else {}
        missing = [f for f in MODEL_FIELDS if f not in args]
        if missing:
            raise Rejected(f"the call lacks the fields {missing}")
        raw = {k: args[k] for k in MODEL_FIELDS}
        surfaces = self.loaded.contract.search_space.surfaces
        try:
            raw["mutation_id"] = mutation_id_for(
                request.run_seed, request.index, raw["surface"], raw["path"], raw["value"]
            )
            raw["proposer"] = self.name[:128]
            mutation = parse_mutation(raw, surfaces)
        except (MutationError, TypeError) as ex:
            raise Rejected(str(ex)) from None
        for item in mutation.evidence:
            if why := check_citation(item, ctx):
                raise Rejected(why)
        self.check_hygiene(mutation, request, ctx)
        try:
            apply_mutation(mutation, request.champion, surfaces)
        except MutationError as ex:
            raise Rejected(str(ex)) from None
        return mutation

    def check_hygiene(self, mutation: Any, request: ProposalRequest, ctx: MutatorContext) -> None:
        """No repeat of a tried edit (normalised), at most axis_guard in a row on one surface.path."""
        key = (mutation.surface, mutation.path)
        if mutation.edit_key in request.tried or any(
            (h.surface, h.path, h.norm_hash) == (*key, norm_hash(mutation.value)) for h in ctx.history
        ):
            raise Rejected(f"{mutation.surface}.{mutation.path} with this value was already tried in this arm")
        k = self.settings.axis_guard
        recent = ctx.history[-k:]
        if len(recent) == k and all((h.surface, h.path) == key for h in recent):
            raise Rejected(
                f"the last {k} candidates all changed {mutation.surface}.{mutation.path}; "
                "propose a change to another surface or path"
            )
