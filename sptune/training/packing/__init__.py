"""Packs: K trials of one stage trained as one fused model, each member still its own solo loop
(docs/design/training.md, "Packs")."""
