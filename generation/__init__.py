"""Generation: sampling matrices from pools, the solver check, verification, audits, export."""
