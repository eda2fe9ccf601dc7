"""An sptune plug-in package: one task (`tasks.MAJORITY`) and one model family (`models.GRU`)."""
