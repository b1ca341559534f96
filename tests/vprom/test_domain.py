import pytest
from hypothesis import given
from hypothesis import strategies as st

from vprom.domain import RELATIONS_OF, Crop, ElementType, Matrix, Relation


def _matrix(**kw):
    base = dict(id=3, relation="or", element_type="object", super_attribute="",
                panels=list(range(16)), elements=["dog"] * 16, answer=5,
                splits={"neutral": "train", "held_out_objects": "test"})
    base.update(kw)
    return Matrix(**base)


def test_matrix_is_made_from_a_json_record():
    m = _matrix()
    assert m.relation is Relation.OR and m.element_type is ElementType.OBJECT
    assert m.panels == tuple(range(16)) and m.elements == ("dog",) * 16
    assert m.splits == (("held_out_objects", "test"), ("neutral", "train"))
    assert m.context == tuple(range(8)) and m.candidates == tuple(range(8, 16))


@given(st.integers(0, 7), st.sampled_from(list(ElementType)))
def test_matrix_takes_any_answer_and_type(answer, element_type):
    relation = RELATIONS_OF[element_type][-1]
    m = _matrix(answer=answer, element_type=element_type.value, relation=relation.value)
    assert (m.answer, m.element_type, m.relation) == (answer, element_type, relation)


@pytest.mark.parametrize("bad", [dict(answer=8), dict(panels=[1] * 15),
                                 dict(relation="progression", element_type="object")])
def test_matrix_rejects_what_the_paper_does_not_allow(bad):
    with pytest.raises(ValueError):
        _matrix(**bad)


def test_crop_keeps_all_labels():
    c = Crop(7, 11, 1, 2, 120, 130, "object_attribute", "red", "color", 99, "",
             ["shirt", "red", "cotton"])
    assert c.labels == ("shirt", "red", "cotton") and c.element_type is ElementType.OBJECT_ATTRIBUTE
    assert c.box == (1, 2, 120, 130)
