"""Migration files are numbered without gaps (read from a folder; no database)."""

import pytest

from pipeline import migrations
from pipeline.core.errors import PipelineError


def test_migration_files_must_be_numbered_without_gaps(tmp_path):
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0003_c.sql").write_text("SELECT 1;")
    with pytest.raises(migrations.MigrationError, match="without gaps"):
        migrations.discover(tmp_path)
    assert issubclass(migrations.MigrationError, PipelineError)
