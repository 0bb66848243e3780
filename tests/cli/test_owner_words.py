"""The owner model has one vocabulary: ``--owners`` (what is asked) and ``heap.owner_model``
(what the snapshot got) are mapped in model/names.py, and inspect's help says both."""

from __future__ import annotations

from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.model.names import OWNER_MODELS_OF, OwnerModel, Owners


def test_every_choice_maps_to_the_models_the_json_says() -> None:
    assert set(OWNER_MODELS_OF) == set(Owners)
    assert {m for models in OWNER_MODELS_OF.values() for m in models} == set(OwnerModel)


def test_inspect_help_names_each_choice_and_the_owner_model_it_gives() -> None:
    result = CliRunner().invoke(app, ["inspect", "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    text = " ".join(result.output.split())
    for choice in Owners:
        assert f"{choice} (" in text, choice
    for model in OwnerModel:
        assert str(model) in text, model


def test_a_choice_that_is_not_one_is_refused_with_the_choices() -> None:
    result = CliRunner().invoke(app, ["inspect", "1", "--owners", "first-reacher"])
    assert result.exit_code == 2 and "'auto', 'dominator', 'census'" in result.output
