"""Values derived from a pack are built once per pack object, and never served for another pack."""

from __future__ import annotations

from service.packs.derived import ByIdentity, per_pack


class _Pack:
    def __init__(self, name: str) -> None:
        self.name = name


def test_a_pack_is_built_from_once_and_an_equal_pack_of_its_own_again() -> None:
    built: list[str] = []

    @per_pack()
    def derive(pack: _Pack) -> str:
        built.append(pack.name)
        return pack.name.upper()

    first = _Pack("a")
    assert derive(first) == "A" and derive(first) == "A"
    assert derive(_Pack("a")) == "A"
    assert built == ["a", "a"]


def test_the_table_starts_over_at_its_bound_and_still_answers_right() -> None:
    @per_pack(bound=2)
    def derive(pack: _Pack) -> str:
        return pack.name

    packs = [_Pack(str(n)) for n in range(5)]
    assert [derive(p) for p in packs] == ["0", "1", "2", "3", "4"]
    assert [derive(p) for p in packs] == ["0", "1", "2", "3", "4"]


def test_values_by_identity_are_served_only_for_the_same_objects_and_parameters() -> None:
    memo: ByIdentity[str] = ByIdentity(bound=8)
    model, engine = _Pack("model"), _Pack("engine")
    memo.put((model, engine), ("linear", 1), "sizes")
    assert memo.get((model, engine), ("linear", 1)) == "sizes"
    assert memo.get((model, engine), ("linear", 2)) is None  # other parameters
    assert memo.get((_Pack("model"), engine), ("linear", 1)) is None  # an equal object of its own


def test_values_by_identity_start_over_at_their_bound() -> None:
    memo: ByIdentity[int] = ByIdentity(bound=2)
    owners = [_Pack(str(n)) for n in range(3)]
    for number, owner in enumerate(owners):
        memo.put((owner,), None, number)
    assert memo.get((owners[2],), None) == 2
    assert memo.get((owners[0],), None) is None
