# `make demo` and `make test` each create .venv and install vprom into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= build/demo
DEMO_EPOCHS ?= 15
# random-weight features share one large direction: centre them so the demo learns quickly
DEMO_TRAIN ?= --center-features

.PHONY: demo test test-slow install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP)

# The whole pipeline on the synthetic corpus: build (synth -> mine -> generate -> verify ->
# stats), features (resnet18 with random weights, as no pretrained weights can be fetched
# offline; 112 px crops, the synthetic objects being ~120 px), the relation network with and
# without the auxiliary loss, the two controls expected at chance (the relation network on
# shuffled context panels, and the context-blind model), evaluation, report and one rendered
# matrix, a 20-problem human study and a 20-problem VLM export (with the lmms-eval command).
demo: $(STAMP)
	$(BIN)/vprom build --synthetic --out $(DEMO_OUT)
	$(BIN)/vprom extract $(DEMO_OUT)/dataset.h5 --vg $(DEMO_OUT)/vg --backbone resnet18 \
		--weights none --input-size 112 --out $(DEMO_OUT)/features/resnet18.h5
	$(BIN)/vprom train $(DEMO_OUT)/dataset.h5 --features $(DEMO_OUT)/features/resnet18.h5 \
		--model rn --split neutral --epochs $(DEMO_EPOCHS) $(DEMO_TRAIN) --out $(DEMO_OUT)/runs/rn-neutral
	$(BIN)/vprom train $(DEMO_OUT)/dataset.h5 --features $(DEMO_OUT)/features/resnet18.h5 \
		--model rn --split neutral --epochs $(DEMO_EPOCHS) $(DEMO_TRAIN) --aux --out $(DEMO_OUT)/runs/rn-neutral-aux
	$(BIN)/vprom train $(DEMO_OUT)/dataset.h5 --features $(DEMO_OUT)/features/resnet18.h5 \
		--model rn --split neutral --epochs $(DEMO_EPOCHS) $(DEMO_TRAIN) --shuffle-context \
		--out $(DEMO_OUT)/runs/controls/rn-shuffled-context
	$(BIN)/vprom train $(DEMO_OUT)/dataset.h5 --features $(DEMO_OUT)/features/resnet18.h5 \
		--model context-blind --split neutral --epochs $(DEMO_EPOCHS) $(DEMO_TRAIN) \
		--out $(DEMO_OUT)/runs/controls/context-blind
	$(BIN)/vprom evaluate $(DEMO_OUT)/runs/rn-neutral
	$(BIN)/vprom evaluate $(DEMO_OUT)/runs/rn-neutral-aux
	$(BIN)/vprom evaluate $(DEMO_OUT)/runs/controls/rn-shuffled-context
	$(BIN)/vprom evaluate $(DEMO_OUT)/runs/controls/context-blind
	$(BIN)/vprom report $(DEMO_OUT)/runs --out $(DEMO_OUT)/report
	$(BIN)/vprom show $(DEMO_OUT)/dataset.h5 --id 0 --vg $(DEMO_OUT)/vg --answer \
		--out $(DEMO_OUT)/matrix-0.png
	$(BIN)/vprom human-study $(DEMO_OUT)/dataset.h5 --vg $(DEMO_OUT)/vg --n 20 \
		--out $(DEMO_OUT)/study
	$(BIN)/vprom export $(DEMO_OUT)/dataset.h5 --format vlm --vg $(DEMO_OUT)/vg --limit 20 \
		--out $(DEMO_OUT)/vlm
	@echo
	@echo "demo done: dataset $(DEMO_OUT)/dataset.h5 (stats: $(DEMO_OUT)/stats.json),"
	@echo "  tables and plots in $(DEMO_OUT)/report/, a rendered matrix in $(DEMO_OUT)/matrix-0.png"
	@echo "a 20-problem human study: $(BIN)/vprom human-serve $(DEMO_OUT)/study, then open"
	@echo "  http://127.0.0.1:8000/?participant=me (docs/human-study.md)"

# Both cores (pytest-xdist); the heavier checks marked `slow` (a wheel in a fresh venv, numpy
# 1.x, every docs snippet, end-to-end grids) run in `make test-slow`, and CI runs both.
test: $(STAMP)
	$(BIN)/pytest -q -n auto -m "not slow"

test-slow: $(STAMP)
	$(BIN)/pytest -q -n auto -m slow

clean:
	rm -rf build .pytest_cache
