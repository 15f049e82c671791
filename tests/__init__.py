"""Tests in three tiers: unit (pure), integration (models in process), e2e (the commands as
processes)."""
