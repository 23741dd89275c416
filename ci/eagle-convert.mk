# eagle-convert.mk: convert an EAGLE draft head for its target and gate CI on its bench, from make.
#
#   include ci/eagle-convert.mk            # in your Makefile (path relative to it), then:
#   make gate EAGLE_DRAFT=./eagle-head EAGLE_TARGET=./target-model
#
#   make -f ci/eagle-convert.mk gate EAGLE_DRAFT=./eagle-head EAGLE_TARGET=./target-model EAGLE_MIN_TAU=1.8
#
# `convert` writes EAGLE_OUT in the EAGLE_LAYOUT layout; `gate` (after `convert`) benches it on the target against
# EAGLE_REFERENCE (default: the raw head itself; `none` = no comparison), with the optional gates below, writes the
# JSON report to EAGLE_REPORT (also when a gate fails) and fails with bench's exit code (3 = a gate failed; make
# reports it as "Error 3"). Empty variables add no flag. Values are passed as single shell words (spaces and quotes
# are fine; surrounding whitespace is stripped; write a `$` as `$$`, as everywhere in make), except EAGLE_CONVERT,
# EAGLE_CONVERT_ARGS and EAGLE_BENCH_ARGS, which are shell words as written.
#
#   EAGLE_DRAFT             the EAGLE head as released (folder or repo id)                  (required)
#   EAGLE_TARGET            the target model (a local folder for `gate`)                    (required)
#   EAGLE_LAYOUT            vllm | vllm-v0 | speculators | sglang                           (vllm)
#   EAGLE_OUT               the converted head's folder, replaced when it exists            (eagle-converted)
#   EAGLE_FC_BIAS           error | drop | fold                                             (error)
#   EAGLE_REFERENCE         head the converted one must behave exactly like (fp32 greedy)   ($(EAGLE_DRAFT))
#   EAGLE_REPORT            the JSON report                                                 (eagle-convert-report.json)
#   EAGLE_MIN_TAU           --min-acceptance-length: fail when τ is below this              (none)
#   EAGLE_REFERENCE_REPORT  --reference-report: a stored `bench --json` report              (none)
#   EAGLE_MAX_TAU_DROP      --max-tau-drop: the τ drop allowed against it                   (bench's: 0.05)
#   EAGLE_K                 -k: speculative tokens per round                                (bench's: 3)
#   EAGLE_MAX_NEW_TOKENS    --max-new-tokens                                                (bench's: 256)
#   EAGLE_PROMPTS           --prompts: a JSONL prompts file                                 (bench's built-in set)
#   EAGLE_CONVERT           the command                                                     (eagle-convert)
#   EAGLE_CONVERT_ARGS      extra convert arguments (shell words, as written)
#   EAGLE_BENCH_ARGS        extra bench arguments (shell words, as written)

EAGLE_DRAFT ?=
EAGLE_TARGET ?=
EAGLE_LAYOUT ?= vllm
EAGLE_OUT ?= eagle-converted
EAGLE_FC_BIAS ?= error
EAGLE_REFERENCE ?= $(EAGLE_DRAFT)
EAGLE_REPORT ?= eagle-convert-report.json
EAGLE_MIN_TAU ?=
EAGLE_REFERENCE_REPORT ?=
EAGLE_MAX_TAU_DROP ?=
EAGLE_K ?=
EAGLE_MAX_NEW_TOKENS ?=
EAGLE_PROMPTS ?=
EAGLE_CONVERT ?= eagle-convert
EAGLE_CONVERT_ARGS ?=
EAGLE_BENCH_ARGS ?=

# $(call _eagle_q,VALUE): VALUE, stripped, as one single-quoted shell word (a ' inside becomes '\'').
_eagle_q = '$(subst ','\'',$(strip $(1)))'
# $(call _eagle_opt,FLAG,VALUE): " FLAG 'VALUE'", or nothing when VALUE is empty.
_eagle_opt = $(if $(strip $(2)), $(1) $(call _eagle_q,$(2)))
# Checked when a recipe runs, not when this file is read: including it never fails a build that does not use it.
_eagle_require = $(if $(strip $($(1))),,$(error $(1) is not set: pass it, e.g. `make $@ EAGLE_DRAFT=path/to/eagle-head \
  EAGLE_TARGET=path/to/target-model` (see the top of eagle-convert.mk)))

_eagle_convert_cmd = $(EAGLE_CONVERT) convert $(call _eagle_q,$(EAGLE_DRAFT)) --target $(call _eagle_q,$(EAGLE_TARGET)) \
  -o $(call _eagle_q,$(EAGLE_OUT)) --to $(call _eagle_q,$(EAGLE_LAYOUT)) --fc-bias $(call _eagle_q,$(EAGLE_FC_BIAS)) \
  --force --quiet$(if $(strip $(EAGLE_CONVERT_ARGS)), $(EAGLE_CONVERT_ARGS))
_eagle_bench_cmd = $(EAGLE_CONVERT) bench --target $(call _eagle_q,$(EAGLE_TARGET)) --draft $(call _eagle_q,$(EAGLE_OUT)) \
  --report $(call _eagle_q,$(EAGLE_REPORT)) --quiet$\
  $(if $(filter-out none,$(strip $(EAGLE_REFERENCE))),$(call _eagle_opt,--reference-draft,$(EAGLE_REFERENCE)))$\
  $(call _eagle_opt,--min-acceptance-length,$(EAGLE_MIN_TAU))$\
  $(call _eagle_opt,--reference-report,$(EAGLE_REFERENCE_REPORT))$\
  $(call _eagle_opt,--max-tau-drop,$(EAGLE_MAX_TAU_DROP))$\
  $(call _eagle_opt,-k,$(EAGLE_K))$\
  $(call _eagle_opt,--max-new-tokens,$(EAGLE_MAX_NEW_TOKENS))$\
  $(call _eagle_opt,--prompts,$(EAGLE_PROMPTS))$\
  $(if $(strip $(EAGLE_BENCH_ARGS)), $(EAGLE_BENCH_ARGS))

# Standalone (`make -f eagle-convert.mk`), `gate` is the default goal; included, the includer's default is kept.
ifeq ($(words $(MAKEFILE_LIST)),1)
.DEFAULT_GOAL := gate
endif
_eagle_default_goal := $(.DEFAULT_GOAL)

.PHONY: convert gate

convert:
	$(call _eagle_require,EAGLE_DRAFT)
	$(call _eagle_require,EAGLE_TARGET)
	$(_eagle_convert_cmd)

gate: convert
	$(_eagle_bench_cmd)

.DEFAULT_GOAL := $(_eagle_default_goal)
