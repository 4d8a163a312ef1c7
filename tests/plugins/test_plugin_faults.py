"""Hostile plugins: fault classes P1-P4 of the reliability campaign at every extension point.

For each of the twelve extension points (converter, router, fallback, layer strategy,
partitioner, grouper, layout, aligner, spec type, architecture, allocator, view layout) a faulty
plugin from :mod:`faulty_plugins`, registered in-process through the public plugin API, breaks
its contract in ways of each fault class:

* P1 -- output that used to escape as a raw exception (``None`` answers, a guard answering a
  string, a method that raises, a priority changed after registering);
* P2 -- faults that used to be blamed on a built-in that merely called the plugin or consumed
  its output (a spec type's sizes, a converter's ints, an allocator's buffers);
* P3 -- faults reported without the plugin's name (invalid priorities and names raised while the
  plugin's hook runs, layers dropped, sizes a built-in rule chokes on);
* P4 -- output that used to be accepted and make a corrupt plan or allocation (huge or negative
  tensors, pooled groups of mixed pages, specs changed in place or forged past validation).

Every fault class arises at every point (a spec type has no priority: its P3 faults are
sizes a built-in rule used to choke on and a hook that raises ``SpecError``). Every case must end
in a :class:`kvrules.PluginError` whose whole message matches, names the faulty plugin as
``plugin '<name>' (registered in-process)`` and names no built-in plugin and not kvrules' own
distribution. The last tests check that the plugins are faulty only where told to be, and that
blocking a faulty plugin restores the baseline exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import faulty_plugins as fp
import pytest

import kvrules
from kvrules import KVRulesPluginManager, get_plugin_manager
from kvrules.hf import build_hf_model
from kvrules.plugin.ask import _late_spec_fault as late_spec_fault

CFG = kvrules.EngineConfig(max_model_len=4096)
MEMORY = 1 << 30
QWEN3_NEXT = Path(kvrules.__file__).parent / "examples" / "hf" / "qwen3-coder-next" / "config.json"
#: a small config that only the faulty architecture (asked first) claims
TOY_CONFIG = {
    "model_type": "test_faulty_model",
    "architectures": ["TestFaultyForCausalLM"],
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "hidden_size": 1024,
    "head_dim": 128,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
#: what a built-in provider looks like in a message: ``plugin 'routers' (kvrules 0.1.0)``
BUILTIN_DIST = re.compile(r"\(kvrules \d")


def attention(heads: int) -> kvrules.FullAttentionSpec:
    return kvrules.FullAttentionSpec(16, num_kv_heads=heads, head_size=128, dtype="bfloat16")


def window(heads: int) -> kvrules.SlidingWindowSpec:
    return kvrules.SlidingWindowSpec(
        16, num_kv_heads=heads, head_size=128, dtype="bfloat16", sliding_window=512
    )


def hybrid() -> dict[str, kvrules.KVCacheSpec]:
    """Pages of 16384 and 32768 bytes: ``block-scale`` doubles the attention layers' block size."""
    return {"attn.0": attention(2), "attn.1": attention(2), "swa.0": window(4), "swa.1": window(4)}


def mismatched() -> dict[str, kvrules.KVCacheSpec]:
    """Pages of 24576 and 32768 bytes: unification fails, so the fallbacks are asked."""
    return {"attn.0": attention(3), "swa.0": window(4), "swa.1": window(4)}


def with_faulty_spec(fault: str) -> dict[str, kvrules.KVCacheSpec]:
    """A third-party spec type beside built-in layers (``block-scale`` resizes it)."""
    odd = fp.FaultySpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16", fault=fault)
    return {"odd.0": odd, "attn.0": attention(2), "swa.0": window(4), "swa.1": window(4)}


# -- what is done with the faulty plugin ----------------------------------------------------------

Act = Callable[[KVRulesPluginManager], object]


def plan(strategies: list[str] | str, specs: Callable[[], dict[str, kvrules.KVCacheSpec]] = hybrid) -> Act:
    def act(pm: KVRulesPluginManager) -> object:
        return kvrules.Planner(strategies, plugin_manager=pm).plan(specs(), MEMORY, CFG)

    return act


def plan_spec(fault: str) -> Act:
    return plan("vllm", lambda: with_faulty_spec(fault))


def allocate(*, allocator: str | None = None, layout: str | None = None) -> Act:
    def act(pm: KVRulesPluginManager) -> kvrules.Allocation:
        made = kvrules.Planner("vllm", plugin_manager=pm).plan(hybrid(), MEMORY, CFG)
        return kvrules.allocate(made, "meta", layout=layout, allocator=allocator, plugin_manager=pm)

    return act


def build(config: Any = TOY_CONFIG, **kwargs: Any) -> Act:
    def act(pm: KVRulesPluginManager) -> object:
        return build_hf_model(config, plugin_manager=pm, **kwargs)

    return act


def register(pm: KVRulesPluginManager) -> object:
    return pm.registries


# -- the faulty plugins ----------------------------------------------------------------------------


class Named(Protocol):
    """A plugin object: ``name`` is its plugin name."""

    name: str


Plugin = Callable[[], Named]


def rule(cls: type, fault: str = "", **fields: Any) -> Plugin:
    """Plugin ``test-<rule name>`` registering ``cls(fault=fault, **fields)``, made inside its hook."""
    name = cls.__dataclass_fields__["name"].default  # type: ignore[attr-defined]
    return lambda: fp.FaultyPlugin(f"test-{name}", rules=lambda: [cls(fault=fault, **fields)])


def tampered(cls: type, **tamper: Any) -> Plugin:
    """Plugin ``test-<rule name>`` that forces ``tamper`` onto its rule after registering it."""
    name = cls.__dataclass_fields__["name"].default  # type: ignore[attr-defined]
    return lambda: fp.FaultyPlugin(f"test-{name}", rules=lambda: [cls()], tamper=tamper)


def spec_type(*types: Any) -> Plugin:
    return lambda: fp.FaultyPlugin("test-faulty-spec", spec_types=lambda: list(types))


def _invalid_spec() -> list[Any]:
    kvrules.FullAttentionSpec(0, num_kv_heads=2, head_size=128, dtype="bfloat16")  # SpecError
    return []


def spec_type_hook_raising() -> fp.FaultyPlugin:
    """A plugin whose spec-type hook builds an invalid spec (``SpecError``)."""
    return fp.FaultyPlugin("test-faulty-spec", spec_types=_invalid_spec)


def not_an_allocator() -> fp.FaultyPlugin:
    return fp.FaultyPlugin("test-faulty-allocator", allocators=[object()])


def not_a_rule() -> fp.FaultyPlugin:
    return fp.FaultyPlugin("test-not-a-rule", rules=[object()])


def architecture(fault: str = "", **fields: Any) -> Plugin:
    return lambda: fp.FaultyPlugin(
        "test-faulty-arch", architectures=lambda: [fp.FaultyArchitecture(fault=fault, **fields)]
    )


def allocator(fault: str = "", **fields: Any) -> Plugin:
    return lambda: fp.FaultyPlugin(
        "test-faulty-allocator", allocators=lambda: [fp.FaultyAllocator(fault=fault, **fields)]
    )


def view_layout(fault: str = "", **fields: Any) -> Plugin:
    return lambda: fp.FaultyPlugin(
        "test-faulty-view", view_layouts=lambda: [fp.FaultyViewLayout(fault=fault, **fields)]
    )


# -- what must be said -------------------------------------------------------------------------------


def blame(word: str, name: str, plugin: str) -> str:
    """``<word> '<name>' (plugin '<plugin>' (registered in-process)) ``: the faulty object named."""
    return f"{word} {name!r} (plugin {plugin!r} (registered in-process)) "


def hook_failed(plugin: str, hook: str) -> str:
    """A plugin whose registration hook raised (it is named, not the registry)."""
    return f"plugin {plugin!r} (registered in-process) failed in kvrules_register_{hook}: "


#: who is blamed at each point, unless a case says otherwise
WHO = {
    "converter": blame("rule", "faulty-convert", "test-faulty-convert"),
    "router": blame("rule", "faulty-router", "test-faulty-router"),
    "fallback": blame("rule", "faulty-fallback", "test-faulty-fallback"),
    "layer-strategy": blame("rule", "faulty-strategy", "test-faulty-strategy"),
    "partitioner": blame("rule", "faulty-partition", "test-faulty-partition"),
    "grouper": blame("rule", "faulty-grouper", "test-faulty-grouper"),
    "layout": blame("rule", "faulty-layout", "test-faulty-layout"),
    "aligner": blame("rule", "faulty-align", "test-faulty-align"),
    "spec-type": blame("spec type", "test_faulty_attention", "test-faulty-spec"),
    "architecture": blame("architecture", "faulty-arch", "test-faulty-arch"),
    "allocator": blame("allocator", "test-alloc", "test-faulty-allocator"),
    "view-layout": blame("view layout", "test-view", "test-faulty-view"),
    "registration": "",
}
GUARD = "a guard must return a Check (kvrules.plugin.applies(...) / declines(...))"
BAD_REASON = "Check(applies=True, reason=12345) from {}(): Check.reason is 12345, not a sentence (str)"
IN_PLACE = "changed a spec it was given in place ({}); specs are immutable"
NO_BLOCKS = "returned a spec for {} that, as a FullAttentionSpec, has block_size 0; it must be an int >= 1"
PRIORITY = "{} {!r}: priority {!r} must be an integer"
INVALID_NAME = "{} name {!r} is invalid: use lower-case words separated by dashes"


def pattern(message: str) -> str:
    """``message`` as a whole-message regex; ``…`` stands for any text (a repr, an address)."""
    return ".*".join(re.escape(part) for part in message.split("…"))


@dataclass(frozen=True)
class Case:
    """One fault: the plugin that has it, what is done with it, the whole message expected."""

    point: str
    fault_class: str
    plugin: Plugin
    act: Act
    message: str


FAULTS: list[Any] = []


def fault(case_id: str, plugin: Plugin, act: Act, who: str | None = None) -> Callable[[str], None]:
    """Add the case ``<point>-P<n>-<what>``; call the result with the message after ``who``
    (by default the point's faulty object, :data:`WHO`)."""
    point, rest = case_id.split("-P", 1)
    prefix = WHO[point] if who is None else who

    def expect(message: str) -> None:
        case = Case(point, f"P{rest[0]}", plugin, act, pattern(prefix + message))
        FAULTS.append(pytest.param(case, id=case_id))

    return expect


# -- converter ----------------------------------------------------------------------------------------
CONV = plan(["vllm", "faulty-convert"])
fault("converter-P1-convert-none", rule(fp.FaultyConverter, "none"), CONV)(
    "returned NoneType from convert(), not a mapping of layer name to spec"
)
fault("converter-P1-check-yes", rule(fp.FaultyConverter, "check-yes"), CONV)(
    f"returned 'yes' from check(): {GUARD}"
)
fault("converter-P2-ints", rule(fp.FaultyConverter, "ints"), CONV)(
    "returned 1 for layer 'attn.0' from convert(), not a spec"
)
fault("converter-P3-drop-layer", rule(fp.FaultyConverter, "drop"), CONV)(
    "changed the set or order of layers in convert()"
)
fault(
    "converter-P3-priority-high",
    rule(fp.FaultyConverter, priority="high"),
    register,
    hook_failed("test-faulty-convert", "rules"),
)(PRIORITY.format("rule", "faulty-convert", "high"))
fault("converter-P4-mutate-input", rule(fp.FaultyConverter, "mutate"), CONV)(
    IN_PLACE.format("FullAttentionSpec")
)
fault("converter-P4-forged-spec", rule(fp.FaultyConverter, "forged-spec"), CONV)(
    NO_BLOCKS.format("layer 'attn.0'")
)

# -- router ------------------------------------------------------------------------------------------
ROUTE = plan(["vllm", "faulty-router"])
fault("router-P1-route-none", rule(fp.FaultyRouter, "none"), ROUTE)(
    "returned NoneType, not a list of KVCacheGroup"
)
fault("router-P1-check-yes", rule(fp.FaultyRouter, "check-yes"), ROUTE)(
    f"returned 'yes' from check(): {GUARD}"
)
fault("router-P1-priority-high-after-registering", tampered(fp.FaultyRouter, priority="high"), ROUTE, who="")(
    "plugin 'test-faulty-router' (registered in-process) changed rule 'faulty-router' after registering it: "
    "registered rule FaultyRouter(…): priority 'high' must be an integer"
)
fault("router-P2-group-of-non-spec", rule(fp.FaultyRouter, "non-spec"), ROUTE)(
    "returned group 0 with spec 5 and layers ('attn.0', 'attn.1', 'swa.0', 'swa.1')"
)
fault("router-P3-drop-layer", rule(fp.FaultyRouter, "drop"), ROUTE)(
    "left 1 layer(s) out of every group, e.g. attn.0"
)
fault(
    "router-P3-priority-float",
    rule(fp.FaultyRouter, priority=1.5),
    register,
    hook_failed("test-faulty-router", "rules"),
)(PRIORITY.format("rule", "faulty-router", 1.5))
fault("router-P4-mixed-pages", rule(fp.FaultyRouter, "mixed-pages"), ROUTE)(
    "pooled layer 'swa.0' (page 32768 bytes) in group 0, whose page is 16384 bytes; a pooled group holds one "
    "page size"
)
fault("router-P4-reason-not-str", rule(fp.FaultyRouter, "check-int-reason"), ROUTE)(
    "returned " + BAD_REASON.format("check")
)
fault("router-P4-mutate-input", rule(fp.FaultyRouter, "mutate"), ROUTE)(IN_PLACE.format("FullAttentionSpec"))
fault("router-P4-forged-block-size", rule(fp.FaultyRouter, "forged-block"), ROUTE)(
    NO_BLOCKS.format("group 0")
)

# -- fallback (unification fails on these pages) -------------------------------------------------------
FALL = plan(["vllm", "faulty-fallback"], mismatched)
fault("fallback-P1-route-none", rule(fp.FaultyFallback, "none"), FALL)(
    "returned NoneType, not a list of KVCacheGroup"
)
fault("fallback-P1-check-raises", rule(fp.FaultyFallback, "check-raise"), FALL)(
    "raised KeyError in check: 'the faulty guard'"
)
fault("fallback-P2-group-of-non-spec", rule(fp.FaultyFallback, "non-spec"), FALL)(
    "returned group 0 with spec 5 and layers ('attn.0', 'swa.0', 'swa.1')"
)
fault("fallback-P2-strings", rule(fp.FaultyFallback, "strings"), FALL)(
    "returned 'attn.0' as group 0, not a KVCacheGroup"
)
fault("fallback-P3-drop-layer", rule(fp.FaultyFallback, "drop"), FALL)(
    "left 1 layer(s) out of every group, e.g. attn.0"
)
fault(
    "fallback-P3-priority-bool",
    rule(fp.FaultyFallback, priority=True),
    register,
    hook_failed("test-faulty-fallback", "rules"),
)(PRIORITY.format("rule", "faulty-fallback", True))
fault("fallback-P4-mixed-pages", rule(fp.FaultyFallback, "mixed-pages"), FALL)(
    "pooled layer 'swa.0' (page 32768 bytes) in group 0, whose page is 24576 bytes; a pooled group holds one "
    "page size"
)
fault("fallback-P4-layer-twice", rule(fp.FaultyFallback, "twice"), FALL)(
    "placed layer 'attn.0' in groups 0 and 3"
)
fault("fallback-P4-forged-block-size", rule(fp.FaultyFallback, "forged-block"), FALL)(
    NO_BLOCKS.format("group 0")
)

# -- layer strategy ----------------------------------------------------------------------------------
UNIFY = plan(["vllm", "faulty-strategy"])
fault("layer-strategy-P1-apply-none", rule(fp.FaultyStrategy, "none"), UNIFY)(
    "returned None for layer 'attn.0', not a spec"
)
fault("layer-strategy-P1-apply-raises", rule(fp.FaultyStrategy, "raise"), UNIFY)(
    "raised ValueError in apply: the faulty strategy"
)
fault("layer-strategy-P2-check-true", rule(fp.FaultyStrategy, "check-true"), UNIFY)(
    f"returned True from check(): {GUARD}"
)
fault("layer-strategy-P2-check-none", rule(fp.FaultyStrategy, "check-none"), UNIFY)(
    f"returned None from check(): {GUARD}"
)
fault(
    "layer-strategy-P3-priority-none",
    rule(fp.FaultyStrategy, priority=None),
    register,
    hook_failed("test-faulty-strategy", "rules"),
)(PRIORITY.format("rule", "faulty-strategy", None))
fault(
    "layer-strategy-P3-invalid-name",
    rule(fp.FaultyStrategy, name="Faulty_Strategy"),
    register,
    hook_failed("test-faulty-strategy", "rules"),
)(INVALID_NAME.format("rule", "Faulty_Strategy"))
fault("layer-strategy-P4-mutate-input", rule(fp.FaultyStrategy, "mutate"), UNIFY)(
    "changed the spec of layer 'attn.0' in place; return a new spec (spec.evolve(...))"
)
fault("layer-strategy-P4-untouchable-field", rule(fp.FaultyStrategy, "field"), UNIFY)(
    "changed field(s) num_kv_heads of layer 'attn.0'; it may only change page_size_padded"
)

# -- partitioner -------------------------------------------------------------------------------------
PART = plan(["vllm", "faulty-partition"])
fault("partitioner-P1-partition-none", rule(fp.FaultyPartitioner, "none"), PART)(
    "returned None from partition(), not (groups, remaining specs)"
)
fault("partitioner-P1-check-yes", rule(fp.FaultyPartitioner, "check-yes"), PART)(
    f"returned 'yes' from check(): {GUARD}"
)
fault("partitioner-P2-ints", rule(fp.FaultyPartitioner, "ints"), PART)(
    "returned (1, 2) from partition(), not (groups, remaining specs)"
)
fault("partitioner-P2-group-of-non-spec", rule(fp.FaultyPartitioner, "non-spec"), PART)(
    "returned group 0 with spec 5 and layers ('attn.0',)"
)
fault("partitioner-P3-lose-layer", rule(fp.FaultyPartitioner, "lose"), PART)(
    "left layer 'attn.1' neither in a group nor in the remaining specs"
)
fault(
    "partitioner-P3-invalid-name",
    rule(fp.FaultyPartitioner, name="faulty partition"),
    register,
    hook_failed("test-faulty-partition", "rules"),
)(INVALID_NAME.format("rule", "faulty partition"))
fault("partitioner-P4-layer-in-both", rule(fp.FaultyPartitioner, "both"), PART)(
    "left layer 'attn.0' in both its groups and the remaining specs, or changed it"
)
fault("partitioner-P4-forged-block-size", rule(fp.FaultyPartitioner, "forged-block"), PART)(
    NO_BLOCKS.format("group 0")
)

# -- grouper -----------------------------------------------------------------------------------------
GROUP = plan(["vllm", "faulty-grouper"])
fault("grouper-P1-group-raises", rule(fp.FaultyGrouper, "raise"), GROUP)(
    "raised ZeroDivisionError in group: the faulty plugin divided by zero"
)
fault("grouper-P1-check-yes", rule(fp.FaultyGrouper, "check-yes"), GROUP)(
    f"returned 'yes' from check(): {GUARD}"
)
fault("grouper-P2-group-none", rule(fp.FaultyGrouper, "none"), GROUP)(
    "returned NoneType, not a list of KVCacheGroup"
)
fault("grouper-P2-strings", rule(fp.FaultyGrouper, "strings"), GROUP)(
    "returned 'attn.0' as group 0, not a KVCacheGroup"
)
fault("grouper-P3-drop-layer", rule(fp.FaultyGrouper, "drop"), GROUP)(
    "left 1 layer(s) out of every group, e.g. attn.0"
)
fault(
    "grouper-P3-priority-high",
    rule(fp.FaultyGrouper, priority="high"),
    register,
    hook_failed("test-faulty-grouper", "rules"),
)(PRIORITY.format("rule", "faulty-grouper", "high"))
fault("grouper-P4-other-page", rule(fp.FaultyGrouper, "other-page"), GROUP)(
    "pooled layer 'attn.0' (page 32768 bytes) in group 0, whose page is 65536 bytes; a pooled group holds one "
    "page size"
)
fault("grouper-P4-layer-twice", rule(fp.FaultyGrouper, "twice"), GROUP)(
    "placed layer 'attn.0' in groups 0 and 4"
)
fault("grouper-P4-forged-block-size", rule(fp.FaultyGrouper, "forged-block"), GROUP)(
    NO_BLOCKS.format("group 0")
)

# -- layout ------------------------------------------------------------------------------------------
LAYOUT = plan(["vllm", "faulty-layout"])
fault("layout-P1-request-bytes-raises", rule(fp.FaultyLayout, "request-raise"), LAYOUT)(
    "raised RuntimeError in request_bytes: the faulty layout cannot count"
)
fault("layout-P1-tensors-none", rule(fp.FaultyLayout, "tensors-none"), LAYOUT)(
    "returned NoneType from tensors(), not a tuple of KVCacheTensor"
)
fault("layout-P2-block-bytes-zero", rule(fp.FaultyLayout, "block-zero"), LAYOUT)(
    "gave 0 for block_bytes(); it must be an int >= 1"
)
fault("layout-P2-block-bytes-str", rule(fp.FaultyLayout, "block-str"), LAYOUT)(
    "gave '4096' for block_bytes(); it must be an int >= 1"
)
fault(
    "layout-P3-priority-float",
    rule(fp.FaultyLayout, priority=1.5),
    register,
    hook_failed("test-faulty-layout", "rules"),
)(PRIORITY.format("rule", "faulty-layout", 1.5))
fault("layout-P4-tensors-1e15-bytes", rule(fp.FaultyLayout, "tensors-huge"), LAYOUT)(
    "laid out 1000000536870912 bytes of tensors on a worker with 1073741824 bytes"
)
fault("layout-P4-request-bytes-str", rule(fp.FaultyLayout, "request-str"), LAYOUT)(
    "gave '12' for request_bytes(); it must be an int >= 0"
)
fault("layout-P4-tensor-size-negative", rule(fp.FaultyLayout, "tensors-negative"), LAYOUT)(
    "gave -5 for tensor 0's size; it must be an int >= 0"
)
fault("layout-P4-tensors-omit-layers", rule(fp.FaultyLayout, "tensors-omit"), LAYOUT)(
    "left 2 layer(s) in no tensor, e.g. attn.0, swa.0"
)
BACKING = plan(["vllm", "faulty-backing-layout"])
BACKER = blame("rule", "faulty-backing-layout", "test-faulty-backing-layout")
fault("layout-P1-backing-raises", rule(fp.FaultyBackingLayout, "backing-raise"), BACKING, BACKER)(
    "raised RuntimeError in backing: the faulty layout cannot place"
)
fault("layout-P1-backing-list", rule(fp.FaultyBackingLayout, "backing-list"), BACKING, BACKER)(
    "returned [] from backing(); it must return a tuple of kvrules.plan.BackingTensor"
)
fault("layout-P4-tensor-of-unknown-layer", rule(fp.FaultyLayout, "tensors-stranger"), LAYOUT)(
    "put layer 'not-a-layer', which is not on this worker, in tensor 2"
)

# -- aligner (through the Hugging Face front door) ------------------------------------------------------
ALIGN = build(QWEN3_NEXT, strategies=["faulty-align"])
ATTN = "layer 'model.layers.3.self_attn.attn'"
fault("aligner-P1-align-none", rule(fp.FaultyAligner, "none"), ALIGN)(
    "returned NoneType from align(), not a mapping of layer name to spec"
)
fault("aligner-P1-explain-none", rule(fp.FaultyAligner, "explain-none"), ALIGN)(
    "returned None from explain(), not a sentence (str)"
)
fault("aligner-P1-check-yes", rule(fp.FaultyAligner, "check-yes"), ALIGN)(
    f"returned 'yes' from check(): {GUARD}"
)
fault("aligner-P2-ints", rule(fp.FaultyAligner, "ints"), ALIGN)(
    "returned 16 for layer 'model.layers.0.linear_attn' from align(), not a spec"
)
fault("aligner-P3-drop-layer", rule(fp.FaultyAligner, "drop"), ALIGN)(
    "changed the set or order of layers in align()"
)
fault(
    "aligner-P3-priority-bool",
    rule(fp.FaultyAligner, priority=True),
    register,
    hook_failed("test-faulty-align", "rules"),
)(PRIORITY.format("rule", "faulty-align", True))
fault("aligner-P4-untouchable-field", rule(fp.FaultyAligner, "field"), ALIGN)(
    f"changed field(s) num_kv_heads of {ATTN}; it may only change block_size, page_size_padded"
)
fault("aligner-P4-mutate-input", rule(fp.FaultyAligner, "mutate"), ALIGN)(
    IN_PLACE.format("FullAttentionSpec")
)
fault("aligner-P4-forged-spec", rule(fp.FaultyAligner, "forged-spec"), ALIGN)(
    f"returned a spec for {ATTN} that, as a FullAttentionSpec, answers real page 32768 <= unpadded page 32768 "
    "<= page 7, which does not hold (all ints > 0)"
)

# -- spec type (beside built-in layers, which built-in rules handle) -------------------------------------
ODD = spec_type(fp.FaultySpec)
RAISED = "raised {} in the sizes of layer 'odd.0': {}"
ANSWERS = "(layer 'odd.0') answers {}"
fault("spec-type-P1-summary-raises", ODD, plan_spec("summary-raise"))(
    RAISED.format("RuntimeError", "this spec type cannot summarise itself")
)
fault("spec-type-P1-blocks-per-request-raises", ODD, plan_spec("blocks-raise"))(
    RAISED.format("RuntimeError", "this spec type cannot count blocks")
)
fault("spec-type-P1-unification-hint-raises", ODD, plan_spec("hint-raise"))(
    RAISED.format("NotImplementedError", "this spec type has no hint")
)
fault("spec-type-P2-page-raises", ODD, plan_spec("page-raise"))(
    RAISED.format("RuntimeError", "this spec type cannot size its page")
)
fault("spec-type-P2-page-zero", ODD, plan_spec("page-zero"))(
    ANSWERS.format("page_size_bytes = 0; it must be an int > 0")
)
fault("spec-type-P2-page-str", ODD, plan_spec("page-str"))(
    ANSWERS.format("page_size_bytes = '16384'; it must be an int > 0")
)
fault("spec-type-P2-memory-raises", ODD, plan_spec("memory-raise"))(
    RAISED.format("OverflowError", "this spec type cannot count a request")
)
fault("spec-type-P2-evolve-raises-in-block-scale", ODD, plan_spec("evolve-raise"), who="")(
    "plugin 'test-faulty-spec' (registered in-process) (module faulty_plugins) raised ValueError while rule "
    "'block-scale' was asked check(): this spec type cannot take another block size"
)
fault("spec-type-P2-merge-non-spec-in-uniform-spec", ODD, plan_spec("merge-int"))(
    ANSWERS.format("merge([spec, spec]) = 5; two equal specs merge into one equal to them")
)
fault("spec-type-P3-page-negative", ODD, plan_spec("page-negative"))(
    ANSWERS.format("page_size_bytes = -1; it must be an int > 0")
)
fault("spec-type-P3-page-fractional", ODD, plan_spec("page-float"))(
    ANSWERS.format("page_size_bytes = 65536.5; it must be an int > 0")
)
fault("spec-type-P3-not-a-spec-class", spec_type(fp.NotASpec), register, who="")(
    "plugin 'test-faulty-spec' (registered in-process) registered <class 'faulty_plugins.NotASpec'>, which is "
    "not a KVCacheSpec subclass"
)
fault(
    "spec-type-P3-spec-error-in-hook",
    spec_type_hook_raising,
    register,
    hook_failed("test-faulty-spec", "spec_types"),
)("SpecError: FullAttentionSpec.block_size=0 must be >= 1")
fault(
    "spec-type-P4-blocks-str-on-a-later-call",
    ODD,
    plan("default", lambda: with_faulty_spec("blocks-later-str")),
)("answers blocks_per_request = '3'; it must be an int >= 0")
fault("spec-type-P4-memory-negative", ODD, plan_spec("memory-negative"))(
    ANSWERS.format("max_memory_usage_bytes = -1; it must be an int >= 0")
)
fault("spec-type-P4-unhashable", ODD, plan_spec("unhashable"))(
    RAISED.format("TypeError", "unhashable spec type")
)
fault("spec-type-P4-uniform-key-unhashable", ODD, plan_spec("key-list"))(
    ANSWERS.format("uniform_type_key() = ['full'], which is neither None nor hashable")
)

# -- architecture (through the Hugging Face front door) -------------------------------------------------
BUILD = build()
fault("architecture-P1-recognises-none", architecture("check-none"), BUILD)(
    f"returned None from recognises(): {GUARD}"
)
fault("architecture-P1-uses-mla-raises", architecture("mla-raise"), BUILD)(
    "raised AttributeError in uses_mla: the faulty architecture has no attention kind"
)
fault("architecture-P1-engine-settings-none", architecture("engine-none"), BUILD)(
    "answered engine_settings() with None; it must be (settings dict, reason str)"
)
fault("architecture-P2-engine-settings-unknown-key", architecture("engine-unknown-key"), BUILD)(
    "answered engine_settings() with engine settings {'bogus_setting': 1}: unknown engine setting(s) "
    "bogus_setting; known: auto_fit_max_model_len, decode_context_parallel_size, "
    "disable_hybrid_kv_cache_manager, draft_layer_prefixes, extra_retained_tokens, kv_cache_layout, "
    "max_model_len, max_num_batched_tokens, max_num_encoder_input_tokens, num_gpu_blocks_override, "
    "prefill_context_parallel_size, reserve_null_block, speculative_method"
)
fault("architecture-P2-build-non-specs", architecture("build-non-specs"), BUILD)(
    "built 'model.layers.0.self_attn.attn': 128; expected layer name -> spec"
)
fault("architecture-P2-build-raises", architecture("build-raise"), BUILD)(
    "raised KeyError in build: 'num_hidden_layers'"
)
fault(
    "architecture-P3-priority-none",
    architecture(priority=None),
    register,
    hook_failed("test-faulty-arch", "architectures"),
)(PRIORITY.format("FaultyArchitecture", "faulty-arch", None))
fault(
    "architecture-P3-invalid-name",
    architecture(name="FaultyArch"),
    register,
    hook_failed("test-faulty-arch", "architectures"),
)(INVALID_NAME.format("FaultyArchitecture", "FaultyArch"))
fault("architecture-P4-build-forged-spec", architecture("build-forged"), BUILD)(
    NO_BLOCKS.format("layer 'model.layers.0.self_attn.attn'")
)
fault("architecture-P4-build-int-keys", architecture("build-int-keys"), BUILD)(
    "built 0: FullAttentionSpec(…); expected layer name -> spec"
)
fault("architecture-P4-reason-not-str", architecture("check-int-reason"), BUILD)(
    "returned " + BAD_REASON.format("recognises")
)

# -- allocator ---------------------------------------------------------------------------------------
ALLOCATE = allocate(allocator="test-alloc")
HANDED = "handed view layout 'flash-attn-nhd' buffer 0 (layer 'attn.0') of "
fault("allocator-P1-supports-none", allocator("supports-none"), ALLOCATE)(
    f"returned None from supports(): {GUARD}"
)
fault("allocator-P1-buffer-raises", allocator("buffer-raise"), ALLOCATE)(
    "raised MemoryError in allocate: the faulty allocator lost its memory"
)
fault("allocator-P1-allocate-none", allocator("allocate-none"), ALLOCATE)(
    "returned NoneType, not (buffers, views)"
)
fault("allocator-P2-supports-str", allocator("supports-str"), ALLOCATE)(
    f"returned 'meta' from supports(): {GUARD}"
)
fault("allocator-P2-buffer-not-a-tensor", allocator("buffer-bytes"), ALLOCATE)(
    HANDED + "bytearray(b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'), which is not a tensor"
)
fault("allocator-P2-buffer-missing", allocator("allocate-short"), ALLOCATE)(
    "returned 1 buffers for 2 tensors"
)
fault(
    "allocator-P3-priority-high",
    allocator(priority="high"),
    register,
    hook_failed("test-faulty-allocator", "allocators"),
)(PRIORITY.format("FaultyAllocator", "test-alloc", "high"))
fault("allocator-P3-not-an-allocator", not_an_allocator, register, who="")(
    "plugin 'test-faulty-allocator' (registered in-process) registered <object object at …> as an allocator, "
    "but it does not derive from kvrules.plugin.Allocator"
)
fault("allocator-P4-buffer-too-small", allocator("buffer-small"), ALLOCATE)(
    HANDED + "268435456 bytes; the plan asks for 536870912"
)
fault("allocator-P4-buffer-too-large", allocator("buffer-large"), ALLOCATE)(
    HANDED + "1073741824 bytes; the plan asks for 536870912"
)
fault("allocator-P4-views-missing", allocator("allocate-no-views"), ALLOCATE)(
    "returned views that do not match the worker's layers"
)

# -- view layout -------------------------------------------------------------------------------------
VIEWS = allocate(layout="test-view")
fault("view-layout-P1-supports-none", view_layout("supports-none"), VIEWS)(
    f"returned None from supports(): {GUARD}"
)
fault("view-layout-P2-build-raises-inside-torch-allocator", view_layout("build-raise"), VIEWS)(
    "raised IndexError in build: the faulty view layout"
)
fault("view-layout-P2-supports-true", view_layout("supports-true"), VIEWS)(
    f"returned True from supports(): {GUARD}"
)
fault(
    "view-layout-P3-priority-float",
    view_layout(priority=1.5),
    register,
    hook_failed("test-faulty-view", "allocators"),
)(PRIORITY.format("FaultyViewLayout", "test-view", 1.5))
fault("view-layout-P4-reason-not-str", view_layout("supports-int-reason"), VIEWS)(
    "returned " + BAD_REASON.format("supports")
)
fault("view-layout-P4-build-none", view_layout("build-none"), VIEWS)(
    "(layer 'attn.0') built None, not a tensor or a non-empty tuple of tensors"
)
fault("view-layout-P4-view-of-wrong-size", view_layout("build-wrong"), VIEWS)(
    "(layer 'attn.0') built views of 1 bytes in all; 16384 blocks of 32768 bytes of content are 536870912 bytes, "
    "each covered once"
)

# -- any plugin --------------------------------------------------------------------------------------
fault("registration-P1-misspelled-hook", fp.MisspelledHook, register)(
    "plugin 'test-misspelled' (registered in-process): unknown hook 'kvrules_register_rulez' in plugin …; the "
    "hooks a kvrules plugin may implement are kvrules_register_allocators, kvrules_register_architectures, "
    "kvrules_register_rules, kvrules_register_spec_types"
)
fault("registration-P3-not-a-rule", not_a_rule, register)(
    "plugin 'test-not-a-rule' (registered in-process) registered <object object at …> as a rule, but it does not "
    "derive from kvrules.plugin.Rule"
)


def run(case: Case) -> BaseException:
    """The error ``case`` ends in (its plugin manager is made inside: a hook may fail there)."""
    try:
        plugin = case.plugin()
        case.act(get_plugin_manager(autoload=False, plugins=[plugin]))
    except Exception as error:
        return error
    pytest.fail("the faulty plugin's output was accepted")


@pytest.mark.parametrize("case", FAULTS)
def test_faulty_plugin_is_refused_naming_it(case: Case) -> None:
    error = run(case)
    assert type(error) is kvrules.PluginError, f"{type(error).__name__} escaped: {error}"
    text = str(error)
    name = str(case.plugin().name)
    assert f"plugin {name!r} (registered in-process)" in text
    assert not BUILTIN_DIST.search(text), f"a built-in's distribution is named: {text}"
    blamed = [b for b in kvrules.BUILTIN_PLUGINS if f"plugin {b!r}" in text]
    assert not blamed, f"built-in plugin(s) {blamed} named: {text}"
    assert re.fullmatch(case.message, text, flags=re.DOTALL), f"unexpected message: {text}"


POINTS = (
    "converter",
    "router",
    "fallback",
    "layer-strategy",
    "partitioner",
    "grouper",
    "layout",
    "aligner",
    "spec-type",
    "architecture",
    "allocator",
    "view-layout",
)


@pytest.mark.parametrize("point", POINTS)
def test_every_point_has_a_fault_of_every_class(point: str) -> None:
    classes = {p.values[0].fault_class for p in FAULTS if p.values[0].point == point}
    assert classes == {"P1", "P2", "P3", "P4"}


# -- the plugins are faulty only where told -------------------------------------------------------------

SOUND_RULES = [
    pytest.param(fp.FaultyConverter, plan(["vllm", "faulty-convert"]), id="converter"),
    pytest.param(fp.FaultyRouter, plan(["vllm", "faulty-router"]), id="router"),
    pytest.param(fp.FaultyFallback, plan(["vllm", "faulty-fallback"], mismatched), id="fallback"),
    pytest.param(fp.FaultyStrategy, plan(["vllm", "faulty-strategy"]), id="layer-strategy"),
    pytest.param(fp.FaultyPartitioner, plan(["vllm", "faulty-partition"]), id="partitioner"),
    pytest.param(fp.FaultyGrouper, plan(["vllm", "faulty-grouper"]), id="grouper"),
    pytest.param(fp.FaultyLayout, plan(["vllm", "faulty-layout"]), id="layout"),
    pytest.param(fp.FaultyBackingLayout, plan(["vllm", "faulty-backing-layout"]), id="backing-layout"),
    pytest.param(fp.FaultyAligner, build(QWEN3_NEXT, strategies=["faulty-align"]), id="aligner"),
]


@pytest.mark.parametrize(("cls", "act"), SOUND_RULES)
def test_the_faulty_rules_without_a_fault_are_sound(cls: type, act: Act) -> None:
    act(get_plugin_manager(autoload=False, plugins=[rule(cls)()]))


def test_the_other_faulty_objects_without_a_fault_are_sound() -> None:
    plan_spec("")(get_plugin_manager(autoload=False, plugins=[ODD()]))
    model = build_hf_model(
        TOY_CONFIG, plugin_manager=get_plugin_manager(autoload=False, plugins=[architecture()()])
    )
    assert model.target.architecture == "faulty-arch"
    for plugin, act in ((allocator(), ALLOCATE), (view_layout(), VIEWS)):
        allocation = act(get_plugin_manager(autoload=False, plugins=[plugin()]))
        assert isinstance(allocation, kvrules.Allocation)
        allocation.verify()


# -- blocking restores the baseline ------------------------------------------------------------------------


def plan_json(pm: KVRulesPluginManager, specs: dict[str, kvrules.KVCacheSpec]) -> str:
    """The plan's JSON, or the error planning ends in (the fallbacks' model does not unify)."""
    try:
        return kvrules.Planner("vllm", plugin_manager=pm).plan(specs, MEMORY, CFG).to_json()
    except kvrules.UnificationError as error:
        return f"UnificationError: {error}"


@pytest.mark.parametrize(
    ("plugin", "rule_name", "specs"),
    [
        pytest.param(rule(fp.FaultyRouter, "mixed-pages"), "faulty-router", hybrid, id="router"),
        pytest.param(rule(fp.FaultyFallback, "mixed-pages"), "faulty-fallback", mismatched, id="fallback"),
        pytest.param(rule(fp.FaultyStrategy, "mutate"), "faulty-strategy", hybrid, id="layer-strategy"),
        pytest.param(rule(fp.FaultyLayout, "tensors-huge"), "faulty-layout", hybrid, id="layout"),
    ],
)
def test_blocking_the_faulty_plugin_restores_the_baseline_plan(
    plugin: Plugin, rule_name: str, specs: Callable[[], dict[str, kvrules.KVCacheSpec]]
) -> None:
    baseline = plan_json(get_plugin_manager(autoload=False), specs())
    with pytest.raises(kvrules.PluginError):
        plan(["vllm", rule_name], specs)(get_plugin_manager(autoload=False, plugins=[plugin()]))
    name = f"test-{rule_name}"
    blocked = get_plugin_manager(autoload=False, plugins=[plugin()], blocked=[name])
    assert blocked.is_blocked(name) and blocked.get_plugin(name) is None
    assert plan_json(blocked, specs()) == baseline
    assert plan_json(get_plugin_manager(autoload=False), specs()) == baseline


def test_blocking_a_faulty_spec_type_architecture_or_allocator_restores_the_baseline() -> None:
    fresh = get_plugin_manager(autoload=False)
    baseline = build_hf_model(QWEN3_NEXT, plugin_manager=fresh)
    arch = get_plugin_manager(
        autoload=False, plugins=[architecture("build-raise")()], blocked=["test-faulty-arch"]
    )
    again = build_hf_model(QWEN3_NEXT, plugin_manager=arch)
    assert again.to_dict() == baseline.to_dict()
    pm = get_plugin_manager(
        autoload=False, plugins=[allocator("buffer-small")()], blocked=["test-faulty-allocator"]
    )
    made = kvrules.Planner("vllm", plugin_manager=pm).plan(hybrid(), MEMORY, CFG)
    assert made.to_json() == plan_json(fresh, hybrid())
    kvrules.allocate(made, "meta", plugin_manager=pm).verify()
    spec = get_plugin_manager(autoload=False, plugins=[ODD()], blocked=["test-faulty-spec"])
    assert "test_faulty_attention" not in spec.registries.spec_types.classes


def test_a_spec_wrong_only_when_asked_again_is_found_among_a_rules_arguments() -> None:
    """Where a rule used a spec's answer without the checked accessors and tripped on it, the
    specs it was given are asked again: the one whose answers are now wrong is at fault."""
    odd = with_faulty_spec("blocks-later-str")["odd.0"]
    assert late_spec_fault(({"odd.0": odd}, CFG)) is None  # the first answer is sane
    found = late_spec_fault(([kvrules.KVCacheGroup(("odd.0",), odd)], CFG))
    assert found == (odd, "answers blocks_per_request = '3'; it must be an int >= 0")
