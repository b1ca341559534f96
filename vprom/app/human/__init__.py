"""A human study of V-PROM problems: sample and write it (`study`), serve it and record the
answers (`server`), and score them beside the models (`scoring`). See docs/human-study.md."""
