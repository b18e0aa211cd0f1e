"""LWW merge by primary key and GTID (seed 000 section 3.3, seed 003 GTIDs, DESIGN.md section 5)."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from shoal.segments.errors import MajorContentError, MergeInputError
from shoal.segments.merge import _first_of_each_key, _version_order, check_major, lww_merge, same_values
from shoal.segments.versioned import DELETED_COLUMN, EPOCH_COLUMN, SEQ_COLUMN, check_versioned, stamp

SCHEMA = pa.schema(
    [
        ("k", pa.int64()),
        ("name", pa.string()),
        ("v", pa.int64()),
        (EPOCH_COLUMN, pa.int64()),
        (SEQ_COLUMN, pa.int64()),
        (DELETED_COLUMN, pa.bool_()),
    ]
)
KEY = ["k"]


def table(rows: list[tuple[Any, ...]], schema: pa.Schema = SCHEMA) -> pa.Table:
    cols: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return pa.table([pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema=schema)


def random_writes(rnd: random.Random, n: int, keyspace: int) -> list[tuple[Any, ...]]:
    """n writes with unique GTIDs (no GTID is ever assigned twice: seed 003)."""
    gtids = rnd.sample([(e, s) for e in range(1, 5) for s in range(0, 400)], n)
    return [
        (
            rnd.randrange(keyspace),
            rnd.choice(["a", "b", None, "zz"]),
            rnd.choice([None, rnd.randint(-5, 5)]),
            e,
            s,
            rnd.random() < 0.15,
        )
        for e, s in gtids
    ]


def reference(rows: list[tuple[Any, ...]], drop_tombstones: bool = False) -> pa.Table:
    best: dict[Any, tuple[Any, ...]] = {}
    for row in rows:
        cur = best.get(row[0])
        if cur is None or (row[3], row[4]) > (cur[3], cur[4]):
            best[row[0]] = row
    out = [best[k] for k in sorted(best)]
    if drop_tombstones:
        out = [r for r in out if not r[5]]
    return table(out)


def split(rnd: random.Random, rows: list[tuple[Any, ...]], pieces: int) -> list[pa.Table]:
    rows = rows[:]
    rnd.shuffle(rows)
    cuts = sorted(rnd.randint(0, len(rows)) for _ in range(pieces - 1))
    bounds = [0, *cuts, len(rows)]
    return [table(rows[a:b]) for a, b in itertools.pairwise(bounds)]


def same(a: pa.Table, b: pa.Table) -> bool:
    return a.combine_chunks().equals(b.combine_chunks())


class TestBasics:
    def test_newest_version_wins_and_output_is_sorted(self) -> None:
        a = table([(2, "old", 1, 1, 5, False), (1, "x", 1, 1, 1, False)])
        b = table([(2, "new", 2, 2, 0, False), (3, "y", 3, 1, 9, False)])
        out = lww_merge([a, b], KEY)
        assert out.column("k").to_pylist() == [1, 2, 3]
        assert out.column("name").to_pylist() == ["x", "new", "y"]  # epoch 2 beats epoch 1 seq 5

    def test_tombstone_shadows_older_versions(self) -> None:
        a = table([(1, "x", 1, 1, 1, False)])
        b = table([(1, None, None, 1, 2, True)])
        out = lww_merge([a, b], KEY)
        assert out.column(DELETED_COLUMN).to_pylist() == [True]
        assert lww_merge([a, b], KEY, drop_tombstones=True).num_rows == 0
        # a newer write after the delete brings the key back
        c = table([(1, "again", 7, 2, 0, False)])
        assert lww_merge([a, b, c], KEY, drop_tombstones=True).column("name").to_pylist() == ["again"]

    def test_why_tombstones_are_only_dropped_in_full_compaction(self) -> None:
        old = table([(1, "x", 1, 1, 1, False)])
        delete = table([(1, None, None, 1, 2, True)])
        dropped = lww_merge([delete], KEY, drop_tombstones=True)  # a partial compaction that dropped it
        assert lww_merge([dropped, old], KEY).num_rows == 1  # the old version is back
        kept = lww_merge([delete], KEY)
        assert lww_merge([kept, old], KEY).column(DELETED_COLUMN).to_pylist() == [True]

    def test_empty_inputs(self) -> None:
        out = lww_merge([table([]), table([])], KEY)
        assert out.num_rows == 0 and out.schema.equals(SCHEMA)

    def test_composite_and_dictionary_keys(self) -> None:
        schema = pa.schema(
            [
                ("region", pa.dictionary(pa.int32(), pa.string())),
                ("day", pa.date32()),
                ("v", pa.float64()),
                (EPOCH_COLUMN, pa.int64()),
                (SEQ_COLUMN, pa.int64()),
                (DELETED_COLUMN, pa.bool_()),
            ]
        )
        a = pa.table(
            {
                "region": pa.array(["eu", "us", "eu"]).dictionary_encode(),
                "day": pa.array([1, 1, 2], pa.date32()),
                "v": [1.0, 2.0, 3.0],
                EPOCH_COLUMN: pa.array([1, 1, 1], pa.int64()),
                SEQ_COLUMN: pa.array([1, 2, 3], pa.int64()),
                DELETED_COLUMN: [False, False, False],
            },
            schema=schema,
        )
        b = a.set_column(2, "v", pa.array([9.0, 9.0, 9.0])).set_column(4, SEQ_COLUMN, pa.array([10, 0, 0], pa.int64()))
        out = lww_merge([a, b], ["region", "day"])
        assert out.num_rows == 3
        assert pc.cast(out.column("region"), pa.string()).to_pylist() == ["eu", "eu", "us"]
        assert out.column("v").to_pylist() == [9.0, 3.0, 2.0]

    def test_column_order_may_differ(self) -> None:
        a = table([(1, "x", 1, 1, 1, False)])
        b = table([(1, "y", 2, 1, 2, False)]).select(list(reversed(SCHEMA.names)))
        out = lww_merge([a, b], KEY)
        assert out.schema.names == SCHEMA.names and out.column("name").to_pylist() == ["y"]

    def test_same_gtid_different_rows_is_still_order_independent(self) -> None:
        a = table([(1, "x", 1, 1, 1, False)])
        b = table([(1, "y", 1, 1, 1, False)])
        c = table([(1, "y", 1, 1, 1, True)])
        assert same(lww_merge([a, b, c], KEY), lww_merge([c, b, a], KEY))
        assert lww_merge([a, b, c], KEY).column(DELETED_COLUMN).to_pylist() == [True]

    def test_large_input_is_columnar(self) -> None:
        n = 300_000
        keys = np.random.default_rng(1).integers(0, 50_000, n)
        t = pa.table(
            {
                "k": pa.array(keys),
                "name": pa.array(np.full(n, "n")),
                "v": pa.array(np.arange(n)),
                EPOCH_COLUMN: pa.array(np.ones(n, np.int64)),
                SEQ_COLUMN: pa.array(np.arange(n, dtype=np.int64)),
                DELETED_COLUMN: pa.array(np.zeros(n, np.bool_)),
            }
        )
        out = lww_merge([t.slice(0, n // 2), t.slice(n // 2)], KEY)
        assert out.num_rows == len(np.unique(keys))
        last = {int(k): i for i, k in enumerate(keys)}  # highest seq = last occurrence
        assert out.column("v").to_pylist()[:100] == [last[k] for k in sorted(last)][:100]


class TestProperties:
    @pytest.mark.parametrize("seed", range(30))
    def test_commutative_idempotent_associative(self, seed: int) -> None:
        rnd = random.Random(seed)
        writes = random_writes(rnd, rnd.randint(0, 120), keyspace=rnd.choice([3, 20, 200]))
        a, b, c = split(rnd, writes, 3)
        ab = lww_merge([a, b], KEY)
        assert same(ab, lww_merge([b, a], KEY))
        assert same(ab, lww_merge([ab, b], KEY))
        assert same(ab, lww_merge([ab, ab], KEY))
        assert same(ab, lww_merge([ab], KEY))
        abc = lww_merge([a, b, c], KEY)
        assert same(abc, lww_merge([ab, c], KEY))
        assert same(abc, lww_merge([a, lww_merge([b, c], KEY)], KEY))
        assert same(abc, reference(writes))

    @pytest.mark.parametrize("seed", range(30))
    def test_any_split_permutation_and_duplication_gives_the_same_rows(self, seed: int) -> None:
        rnd = random.Random(1000 + seed)
        writes = random_writes(rnd, rnd.randint(1, 150), keyspace=rnd.choice([5, 50]))
        expected = reference(writes)
        for _ in range(4):
            pieces = split(rnd, writes, rnd.randint(1, 6))
            # the same write delivered again (a replayed segment or WAL batch)
            pieces += split(rnd, rnd.sample(writes, rnd.randint(0, len(writes))), 2)
            rnd.shuffle(pieces)
            assert same(lww_merge(pieces, KEY), expected)
            assert same(lww_merge(pieces, KEY, drop_tombstones=True), reference(writes, drop_tombstones=True))


def full_merge(tables: list[pa.Table], key_columns: list[str]) -> pa.Table:
    """The merge without its distinct-keys shortcut: sort by key and GTID, keep each key's first."""
    combined = pa.concat_tables(tables)
    ordered = combined.take(_version_order(combined, key_columns)).combine_chunks()
    return ordered.filter(_first_of_each_key(ordered, key_columns))


class TestDistinctKeys:
    """A memtable of fresh writes holds each key once: the merge then sorts the keys alone."""

    @pytest.mark.parametrize(
        "keys",
        [
            pa.array([5, -3, 2**62, -(2**63), 2**63 - 1, 0], pa.int64()),
            pa.array([2**64 - 1, 0, 2**63, 7, 2**63 - 1], pa.uint64()),
            pa.array([3, 1, 2], pa.int8()),
            pa.array(["b", "", "a", "ab", "\u00e9"], pa.string()),
            pa.array([b"\xff", b"\x00", b"\x00\x00"], pa.binary()),
            pa.array(["eu", "us", "ap"]).dictionary_encode(),
        ],
        ids=["int64", "uint64", "int8", "string", "binary", "dictionary"],
    )
    def test_every_key_type_gives_the_full_merge(self, keys: pa.Array) -> None:
        n = len(keys)
        t = pa.table(
            {
                "k": keys,
                "v": pa.array(range(n), pa.int64()),
                EPOCH_COLUMN: pa.array([1] * n, pa.int64()),
                SEQ_COLUMN: pa.array(range(n, 0, -1), pa.int64()),
                DELETED_COLUMN: pa.array([i % 2 == 0 for i in range(n)]),
            }
        )
        pieces = [t.slice(0, n // 2), t.slice(n // 2)]
        out = lww_merge(pieces, KEY)
        assert out.num_rows == n and same(out, full_merge(pieces, KEY))
        sortable = (
            pc.cast(out.column("k"), keys.type.value_type) if pa.types.is_dictionary(keys.type) else out.column("k")
        )
        assert sortable.to_pylist() == sorted(sortable.to_pylist())

    @pytest.mark.parametrize("seed", range(20))
    def test_random_inputs_with_and_without_repeats(self, seed: int) -> None:
        rnd = random.Random(5000 + seed)
        n = rnd.randint(1, 400)
        keyspace = rnd.choice([n // 2 + 1, 10 * n, 2**62])  # repeats likely, rare, or none
        writes = random_writes(rnd, min(n, 1600), keyspace)
        pieces = split(rnd, writes, rnd.randint(1, 4))
        out = lww_merge(pieces, KEY)
        assert same(out, full_merge(pieces, KEY)) and same(out, reference(writes))
        assert same(lww_merge(pieces, KEY, drop_tombstones=True), reference(writes, drop_tombstones=True))

    def test_one_repeated_key_among_distinct_ones_keeps_the_newest(self) -> None:
        rows = [(k, "x", k, 1, k, False) for k in range(1000)]
        rows.append((500, "newer", -1, 2, 0, False))  # epoch 2 beats epoch 1 whatever the seq
        out = lww_merge([table(rows[:600]), table(rows[600:])], KEY)
        assert out.num_rows == 1000
        assert out.column("name").to_pylist()[500] == "newer" and out.column("v").to_pylist()[500] == -1

    def test_composite_key_with_repeats_in_one_column_only(self) -> None:
        schema = pa.schema(
            [
                ("a", pa.int64()),
                ("b", pa.string()),
                (EPOCH_COLUMN, pa.int64()),
                (SEQ_COLUMN, pa.int64()),
                (DELETED_COLUMN, pa.bool_()),
            ]
        )
        t = pa.table(
            {
                "a": [2, 1, 2, 1],
                "b": ["y", "y", "x", "x"],
                EPOCH_COLUMN: [1] * 4,
                SEQ_COLUMN: [1, 2, 3, 4],
                DELETED_COLUMN: [False] * 4,
            },
            schema=schema,
        )
        out = lww_merge([t], ["a", "b"])
        assert list(zip(out.column("a").to_pylist(), out.column("b").to_pylist(), strict=True)) == [
            (1, "x"),
            (1, "y"),
            (2, "x"),
            (2, "y"),
        ]
        assert same(out, full_merge([t], ["a", "b"]))


class TestInputChecks:
    @pytest.mark.parametrize(
        "mutate",
        [
            lambda t: t.drop_columns([SEQ_COLUMN]),
            lambda t: t.set_column(3, EPOCH_COLUMN, pc.cast(t.column(EPOCH_COLUMN), pa.int32())),
            lambda t: t.set_column(5, DELETED_COLUMN, pa.array([None], pa.bool_())),
            lambda t: t.set_column(0, "k", pa.array([None], pa.int64())),
            lambda t: t.set_column(0, "k", pa.array([1.5])),
            lambda t: t.set_column(0, "k", pa.array([[1]])),
            lambda t: t.drop_columns(["k"]),
            lambda t: t.append_column("k", pa.array([1])),
        ],
    )
    def test_bad_tables(self, mutate: Any) -> None:
        good = table([(1, "x", 1, 1, 1, False)])
        with pytest.raises(MergeInputError):
            lww_merge([good, mutate(good)], KEY)

    def test_bad_arguments(self) -> None:
        good = table([(1, "x", 1, 1, 1, False)])
        with pytest.raises(MergeInputError):
            lww_merge([], KEY)
        with pytest.raises(MergeInputError):
            lww_merge(good, KEY)
        with pytest.raises(MergeInputError):
            lww_merge([good], "k")
        with pytest.raises(MergeInputError):
            lww_merge([good], [EPOCH_COLUMN])
        with pytest.raises(MergeInputError):
            lww_merge([good, good.set_column(2, "v", pa.array(["s"]))], KEY)
        with pytest.raises(MergeInputError):
            lww_merge([good, good.drop_columns(["v"])], KEY)


class TestStamp:
    def test_one_gtid_per_row(self) -> None:
        t = stamp(pa.table({"k": [1, 1, 2]}), epoch=3, first_seq=10)
        check_versioned(t, ["k"])
        assert t.column(SEQ_COLUMN).to_pylist() == [10, 11, 12]
        assert t.column(EPOCH_COLUMN).to_pylist() == [3, 3, 3]
        # two writes of the same key in one batch: the later one wins
        assert lww_merge([t], ["k"]).column(SEQ_COLUMN).to_pylist() == [11, 12]

    def test_deletes_and_errors(self) -> None:
        t = stamp(pa.table({"k": [1, 2]}), epoch=1, first_seq=0, deleted=pa.array([True, False]))
        assert t.column(DELETED_COLUMN).to_pylist() == [True, False]
        with pytest.raises(MergeInputError):
            stamp(t, epoch=1, first_seq=0)
        with pytest.raises(MergeInputError):
            stamp(pa.table({"k": [1]}), epoch=-1, first_seq=0)
        with pytest.raises(MergeInputError):
            stamp(pa.table({"k": [1]}), epoch=1, first_seq=0, deleted=pa.array([True, False]))


def test_a_kept_tombstone_stops_a_row_merged_later_with_an_older_gtid() -> None:
    """Why majors keep tombstones (spark_jobs.compaction.policy): a segment merged after the major (a
    returning old leader's pushed one, source 3.5) keeps the GTIDs its rows were written with. k=7 was
    written at 1:5 by the old leader, deleted at 2:3 by the new one, then compacted; the old leader's
    segment holding k=7 at 1:5 is merged afterwards. With the tombstone in the major the key stays
    deleted; without it (what `--full` did) the key came back on every replica."""
    schema = pa.schema([("k", pa.uint64()), ("v", pa.string())])
    old = stamp(pa.table({"k": pa.array([7], pa.uint64()), "v": ["v1"]}, schema=schema), epoch=1, first_seq=5)
    tomb = stamp(
        pa.table({"k": pa.array([7], pa.uint64()), "v": [None]}, schema=schema), epoch=2, first_seq=3, deleted=True
    )
    merged_later = lww_merge([old], KEY)
    major = lww_merge([old, tomb], KEY)
    view = lww_merge([major, merged_later], KEY).filter(pc.invert(pc.field(DELETED_COLUMN)))
    assert view.num_rows == 0
    dropped = lww_merge([old, tomb], KEY, drop_tombstones=True)
    assert lww_merge([dropped, merged_later], KEY).column("v").to_pylist() == ["v1"]  # the deleted key is back


def test_check_major_takes_the_merge_and_names_what_differs() -> None:
    rnd = random.Random(7)
    sources = [table(random_writes(rnd, 60, 25)) for _ in range(3)]
    merged = lww_merge(sources, KEY)
    check_major(
        sources, merged.take(pa.array(rnd.sample(range(merged.num_rows), merged.num_rows))), KEY, segment_id="m"
    )
    keys = merged.column("k").to_pylist()
    lost = merged.filter(pa.array([k != keys[3] for k in keys]))
    with pytest.raises(MajorContentError) as err:
        check_major(sources, lost, KEY, segment_id="m")
    assert (err.value.segment_id, err.value.missing, err.value.extra) == ("m", 1, 0)
    assert err.value.example.startswith(f"missing k={keys[3]} at gtid ")
    older = pa.concat_tables([lost, table([(keys[3], "x", 0, 0, 0, False)])])  # a version below the newest
    with pytest.raises(MajorContentError) as err:
        check_major(sources, older, KEY, segment_id="m")
    assert (err.value.missing, err.value.extra) == (1, 1)
    twice = pa.concat_tables([merged, merged.slice(5, 1)])
    with pytest.raises(MajorContentError) as err:
        check_major(sources, twice, KEY, segment_id="m")
    assert err.value.extra == 1 and "a key held twice" in err.value.example
    narrow = merged.set_column(0, "k", pc.cast(merged.column("k"), pa.int32()))
    with pytest.raises(MajorContentError, match="column k is int32, int64 in the segments"):
        check_major(sources, narrow, KEY, segment_id="m")
    check_major([], table([]), KEY, segment_id="m")  # nothing replaced, nothing held
    with pytest.raises(MajorContentError):
        check_major([], merged, KEY, segment_id="m")


def test_check_major_compares_values_null_with_null_and_nan_with_nan() -> None:
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64()), *SCHEMA.remove(0).remove(0).remove(0)])
    rows = [(1, float("nan"), 1, 1, False), (2, None, 1, 2, False), (3, 0.5, 1, 3, False)]
    source = pa.table(list(map(list, zip(*rows, strict=True))), schema=schema)
    check_major([source], lww_merge([source], KEY), KEY, segment_id="m", value_columns=["x"])
    changed = source.set_column(1, "x", pa.array([float("nan"), None, 0.25]))
    with pytest.raises(MajorContentError) as err:
        check_major([source], changed, KEY, segment_id="m", value_columns=["x"])
    assert (err.value.missing, err.value.extra, err.value.changed) == (0, 0, 1)
    assert err.value.example == "x of k=3 at gtid 1:3 is 0.25, 0.5 in the segments"
    check_major([source], changed, KEY, segment_id="m")  # versions only


def _float(bits: int) -> float:
    return float(np.array([bits], np.uint64).view(np.float64)[0])


def test_check_major_compares_floats_by_their_bits() -> None:
    """0.0 and -0.0 compare equal and any two NaNs are NaN: a major that changed a value's sign or a
    NaN's payload would pass a check by value, so floats compare by their bits."""
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64()), *SCHEMA.remove(0).remove(0).remove(0)])
    nan, other_nan = _float(0x7FF8000000000000), _float(0x7FF8000000000001)
    rows = [(1, 0.0, 1, 1, False), (2, nan, 1, 2, False), (3, -0.0, 1, 3, False)]
    source = pa.table(list(map(list, zip(*rows, strict=True))), schema=schema)
    check_major([source], lww_merge([source], KEY), KEY, segment_id="m", value_columns=["x"])
    for changed_values in ([-0.0, nan, -0.0], [0.0, other_nan, -0.0], [0.0, nan, 0.0]):
        changed = source.set_column(1, "x", pa.array(changed_values, pa.float64()))
        with pytest.raises(MajorContentError) as err:
            check_major([source], changed, KEY, segment_id="m", value_columns=["x"])
        assert err.value.changed == 1, changed_values


def test_same_values_compares_float32_bits_and_nulls() -> None:
    ours = pa.chunked_array([pa.array([0.0, -0.0, None, 1.5], pa.float32()), pa.array([None], pa.float32())])
    theirs = pa.chunked_array([pa.array([0.0, 0.0, None, None, None], pa.float32())])
    assert same_values(ours, theirs).to_pylist() == [True, False, True, False, True]
    assert same_values(pa.array(["a", None]), pa.array(["a", "b"])).to_pylist() == [True, False]
    # a wider float is compared as it is: narrowed to float32, 1.0000000001 would round to 1.0
    wide = pa.array([1.0000000001, 1.0, 0.1], pa.float64())
    assert same_values(pa.array([1.0, 1.0, 0.1], pa.float32()), wide).to_pylist() == [False, True, False]


def test_exactly_as_converts_only_what_it_keeps() -> None:
    """A node's scan hands columns over as the table's types: Arrow's own conversion turned integers
    into their text and 1e300 into a float32 infinity; exactly_as refuses both (SchemaError) and
    converts only within one kind, losing nothing."""
    from shoal.errors import SchemaError
    from shoal.segments.merge import exactly_as

    same = pa.array(["a", None])
    assert exactly_as(same, pa.string(), name="v") is same
    assert exactly_as(pa.array(["a"], pa.large_string()), pa.string(), name="v").type == pa.string()
    assert exactly_as(pa.array([1, None], pa.int32()), pa.int64(), name="n").to_pylist() == [1, None]
    ms = pa.array([1_000_000], pa.timestamp("us"))
    assert exactly_as(ms, pa.timestamp("ms"), name="t").to_pylist() == ms.to_pylist()
    assert exactly_as(pa.array([1.5, float("nan")]), pa.float32(), name="f").type == pa.float32()
    for values, target in (
        (pa.array([1, 2]), pa.string()),  # integers are not text
        (pa.array([1e300]), pa.float32()),  # no float32 holds it
        (pa.array([1], pa.timestamp("us")), pa.timestamp("ms")),  # a microsecond is no millisecond
        (pa.array([-1]), pa.uint64()),
        (pa.array([True]), pa.int64()),
    ):
        with pytest.raises(SchemaError, match="cannot hold exactly"):
            exactly_as(values, target, name="c")


@pytest.mark.parametrize("pair", [(0.0, -0.0), (float("nan"), -float("nan"))], ids=["signed zero", "nan payloads"])
def test_a_tie_between_floats_equal_as_numbers_merges_the_same_in_any_order(pair: tuple[float, float]) -> None:
    """Two versions of a key at one GTID (never produced, but the merge promises an order-free
    result) that differ only in a float's bits: the sort compares bits, as ``same_values`` does."""

    def version(value: float) -> pa.Table:
        return pa.table(
            {
                "k": pa.array([1], pa.int64()),
                "f": pa.array([value], pa.float64()),
                EPOCH_COLUMN: pa.array([3], pa.int64()),
                SEQ_COLUMN: pa.array([7], pa.int64()),
                DELETED_COLUMN: pa.array([False]),
            }
        )

    a, b = (version(v) for v in pair)
    assert not same_values(a.column("f"), b.column("f"))[0].as_py()
    one, other = lww_merge([a, b], ["k"]), lww_merge([b, a], ["k"])
    assert same_values(one.column("f"), other.column("f"))[0].as_py()
