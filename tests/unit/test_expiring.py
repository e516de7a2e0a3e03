"""The in-process cache of search (`SCOPE_SIZES`): values expire, and
a cache keyed by user keeps a bounded number of them."""

from shared.db.search_filters import ScopeSizes
from shared.expiring import Expiring
from shared.memory.ranking import Scope


def test_a_value_is_kept_for_its_ttl_and_stored_again_it_lives_longer():
    now = [0.0]
    cache: Expiring[str, int] = Expiring(ttl=60, clock=lambda: now[0])
    cache.store("a", 1)
    now[0] = 59.9
    assert cache.cached("a") == 1
    cache.store("a", 2)
    now[0] = 60.0
    assert cache.cached("a") == 2  # stored again at 59.9: until 119.9
    now[0] = 119.9
    assert cache.cached("a") is None


def test_storing_forgets_the_expired_values_and_the_oldest_beyond_the_size():
    now = [0.0]
    cache: Expiring[str, int] = Expiring(ttl=60, clock=lambda: now[0], size=3)
    for i, key in enumerate("abc"):
        now[0] = float(i)
        cache.store(key, i)
    now[0] = 3.0
    cache.store("a", 10)  # "a" moves to the newest
    cache.store("d", 3)  # one too many: the oldest, "b", goes
    assert len(cache) == 3
    assert [cache.cached(k) for k in "abcd"] == [10, None, 2, 3]
    now[0] = 62.5  # "c" (stored at 2) expired; the rest not
    cache.store("e", 4)
    assert len(cache) == 3
    assert [cache.cached(k) for k in "acde"] == [10, None, 3, 4]
    now[0] = 200.0  # all expired: storing one more forgets them, below the size too
    cache.store("f", 5)
    assert len(cache) == 1 and cache.cached("f") == 5


def test_a_scopes_size_is_kept_per_table_app_user_project_and_whether_a_session_is_named():
    key = ScopeSizes.key
    base = key("memories", Scope("a", "u", "p", ""), 5000)
    assert base == key("memories", Scope("a", "u", "p", ""), 5000)
    others = [
        key("episodes", Scope("a", "u", "p", ""), 5000),
        key("memories", Scope("b", "u", "p", ""), 5000),
        key("memories", Scope("a", "v", "p", ""), 5000),
        key("memories", Scope("a", "u", "q", ""), 5000),
        key("memories", Scope("a", "u", "p", "s1"), 5000),
        key("memories", Scope("a", "u", "p", ""), 100),
    ]
    assert base not in others and len(set(others)) == len(others)
    # every named session counts the same rows (all the user's session memories)
    assert key("memories", Scope("a", "u", "p", "s1"), 5000) == key(
        "memories", Scope("a", "u", "p", "s2"), 5000
    )
