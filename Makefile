# `make demo` creates .venv and installs what the demo runs: vprom with pyarrow (the VLM
# export's Parquet); `make test` installs vprom with its test extra. Each install has its stamp, so `make test` after
# `make demo` still installs the test extra.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
DEMO_OUT ?= build/demo
D := $(DEMO_OUT)
# The relation network with the auxiliary loss on every feature source. The demo's settings
# (not `train`'s defaults, which are the paper's for 2048-d features on VG): a narrower network,
# Adam on a cosine schedule and batches of 128, so that it learns on 2 cores within minutes, on
# centred features (random-weight features share one large direction).
DEMO_EPOCHS ?= 15
# matrices per crop (`build --scale`): the relation network's accuracy follows the number of
# training problems, the features' cost the number of crops; a larger scale (about the same
# crops, more problems) shows the benchmark more clearly, in more time (docs/perception.md)
DEMO_SCALE ?= 0.1
DEMO_TRAIN ?= --epochs $(DEMO_EPOCHS) --hidden 128 --optimizer adam --lr 6e-3 \
	--lr-schedule cosine --score-init 1 --batch-size 128 --center-features
# the held-out split on which the labels run shows the drop from neutral
DEMO_HELD_OUT ?= held_out_attributes
# the perception model: resnet18 from random weights on the neutral training crops at 64 px;
# from random weights it needs several hundred steps (5 epochs of batch 32, 600 steps) to stand
# clear of untrained features, its learning rate falling on a cosine from 2e-3
PERCEIVE_SIZE ?= 64
PERCEIVE_EPOCHS ?= 5
PERCEIVE_BATCH ?= 32
PERCEIVE_LR ?= 2e-3

.PHONY: demo test test-slow install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e '.[hf]'
	touch $(STAMP)

$(TEST_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP) $(TEST_STAMP)

# The whole pipeline on the synthetic corpus (docs/perception.md): build (synth -> mine ->
# generate -> verify -> stats); three feature sources: labels (perfect perception), and
# resnet18 on 64 px crops, with random weights and trained on the corpus's labels by
# `vprom perceive`; the relation network with aux on each on neutral, on labels on one
# held-out split too; the two controls expected at chance (the relation network on shuffled
# context panels, the context-blind model), on labels; evaluation; one rendered matrix; a
# small human study; and last the report, which prints the perception table and the verdict.
demo: $(STAMP)
	$(BIN)/vprom build --synthetic --scale $(DEMO_SCALE) --out $(D)
	$(BIN)/vprom extract $(D)/dataset.h5 --backbone labels --out $(D)/features/labels.h5
	$(BIN)/vprom extract $(D)/dataset.h5 --vg $(D)/vg --backbone resnet18 --weights none \
		--input-size $(PERCEIVE_SIZE) --out $(D)/features/resnet18.h5
	$(BIN)/vprom perceive $(D)/dataset.h5 --vg $(D)/vg --split neutral --backbone resnet18 \
		--weights none --input-size $(PERCEIVE_SIZE) --epochs $(PERCEIVE_EPOCHS) \
		--batch-size $(PERCEIVE_BATCH) --lr $(PERCEIVE_LR) --out $(D)/perceive/resnet18.pt
	$(BIN)/vprom extract $(D)/dataset.h5 --vg $(D)/vg --backbone resnet18 \
		--weights $(D)/perceive/resnet18.pt --input-size $(PERCEIVE_SIZE) \
		--out $(D)/features/perceive-resnet18.h5
	$(BIN)/vprom train $(D)/dataset.h5 --features $(D)/features/labels.h5 --split neutral \
		--model rn $(DEMO_TRAIN) --aux --out $(D)/runs/labels/rn-aux-neutral
	$(BIN)/vprom train $(D)/dataset.h5 --features $(D)/features/labels.h5 \
		--split $(DEMO_HELD_OUT) --model rn $(DEMO_TRAIN) --aux --out $(D)/runs/labels/rn-aux-$(DEMO_HELD_OUT)
	$(BIN)/vprom train $(D)/dataset.h5 --features $(D)/features/perceive-resnet18.h5 \
		--split neutral --model rn $(DEMO_TRAIN) --aux --out $(D)/runs/perceive/rn-aux-neutral
	$(BIN)/vprom train $(D)/dataset.h5 --features $(D)/features/resnet18.h5 --split neutral \
		--model rn $(DEMO_TRAIN) --aux --out $(D)/runs/random/rn-aux-neutral
	$(BIN)/vprom train $(D)/dataset.h5 --features $(D)/features/labels.h5 --split neutral \
		--model rn $(DEMO_TRAIN) --aux --shuffle-context --out $(D)/runs/controls/rn-aux-shuffled-context
	$(BIN)/vprom train $(D)/dataset.h5 --features $(D)/features/labels.h5 --split neutral \
		--model context-blind $(DEMO_TRAIN) --out $(D)/runs/controls/context-blind
	for run in $(D)/runs/*/*/; do $(BIN)/vprom evaluate $$run || exit 1; done
	$(BIN)/vprom show $(D)/dataset.h5 --id 0 --vg $(D)/vg --answer --out $(D)/matrix-0.png
	$(BIN)/vprom human-study $(D)/dataset.h5 --vg $(D)/vg --n 20 --out $(D)/study
	$(BIN)/vprom export $(D)/dataset.h5 --format vlm --vg $(D)/vg --limit 20 --out $(D)/vlm
	@echo "a 20-problem human study: $(BIN)/vprom human-serve $(D)/study, then open"
	@echo "  http://127.0.0.1:8000/?participant=me (docs/human-study.md)"
	@echo "the data set: $(D)/dataset.h5 (stats: $(D)/stats.json); a matrix: $(D)/matrix-0.png"
	@echo
	$(BIN)/vprom report $(D)/runs --out $(D)/report

# Both cores (pytest-xdist); the heavier checks marked `slow` (a wheel in a fresh venv, numpy
# 1.x, every docs snippet, end-to-end grids) run in `make test-slow`, and CI runs both.
test: $(TEST_STAMP)
	$(BIN)/pytest -q -n auto -m "not slow"

test-slow: $(TEST_STAMP)
	$(BIN)/pytest -q -n auto -m slow

clean:
	rm -rf build .pytest_cache
