# `make demo` and `make test` each create .venv and install vprom into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= build/demo
DEMO_EPOCHS ?= 10

.PHONY: demo test install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP)

# The whole pipeline on the synthetic corpus: build (synth -> mine -> generate -> verify ->
# stats), features (resnet18, random weights: no pretrained weights offline), the relation
# network with and without the auxiliary loss, evaluation, report and one rendered matrix.
demo: $(STAMP)
	$(BIN)/vprom build --synthetic --out $(DEMO_OUT)
	$(BIN)/vprom extract $(DEMO_OUT)/dataset.h5 --vg $(DEMO_OUT)/vg --backbone resnet18 \
		--weights none --out $(DEMO_OUT)/features/resnet18.h5
	$(BIN)/vprom train $(DEMO_OUT)/dataset.h5 --features $(DEMO_OUT)/features/resnet18.h5 \
		--model rn --split neutral --epochs $(DEMO_EPOCHS) --out $(DEMO_OUT)/runs/rn-neutral
	$(BIN)/vprom train $(DEMO_OUT)/dataset.h5 --features $(DEMO_OUT)/features/resnet18.h5 \
		--model rn --split neutral --epochs $(DEMO_EPOCHS) --aux --out $(DEMO_OUT)/runs/rn-neutral-aux
	$(BIN)/vprom evaluate $(DEMO_OUT)/runs/rn-neutral
	$(BIN)/vprom evaluate $(DEMO_OUT)/runs/rn-neutral-aux
	$(BIN)/vprom report $(DEMO_OUT)/runs/rn-neutral $(DEMO_OUT)/runs/rn-neutral-aux \
		--out $(DEMO_OUT)/report
	$(BIN)/vprom show $(DEMO_OUT)/dataset.h5 --id 0 --vg $(DEMO_OUT)/vg --answer \
		--out $(DEMO_OUT)/matrix-0.png
	@echo
	@echo "demo done: dataset $(DEMO_OUT)/dataset.h5 (stats: $(DEMO_OUT)/stats.json),"
	@echo "  tables and plots in $(DEMO_OUT)/report/, a rendered matrix in $(DEMO_OUT)/matrix-0.png"

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf build .pytest_cache
