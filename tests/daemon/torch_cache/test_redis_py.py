"""Debian's redis-py (python3-redis) against a real kilnd's torch cache socket.

What torch.compile does through redis-py (torch/_inductor/remote_cache.py): Redis.from_url
with a unix:// URL, get() and set(key, value, ex=ttl) of JSON values of 0.1-10 MB. And what
torch relies on: a refusal reaches it as redis.exceptions.ConnectionError (the only error
torch catches), never as a ResponseError.

Run by ctest: /usr/bin/python3 test_redis_py.py --kilnd <path> (see CMakeLists.txt).
"""

import argparse
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

import redis

KILND = None
FX_KEY = "pt2:fx-graph-v1::fabcdef0123456789:c1"


class Kilnd:
    """A kilnd on a fresh store with [torch_cache] on a short socket path."""

    def __init__(self, extra_toml="", durability="sync", extra_args=()):
        self.dir = tempfile.mkdtemp(prefix="kiln-py-", dir="/tmp")
        self.torch_sock = os.path.join(self.dir, "torch.sock")
        config = os.path.join(self.dir, "kilnd.toml")
        with open(config, "w") as f:
            # What is stored and answered is tested here, not how fast, unless a case sets
            # the limit: a 10 MB sync SET on a loaded CI disk must not become a late reply.
            limit = "" if "reply_timeout_ms" in extra_toml else "reply_timeout_ms = 60000\n"
            f.write('[torch_cache]\nsocket = "%s"\nmax_value_bytes = "64MiB"\ndurability = "%s"\n%s%s'
                    % (self.torch_sock, durability, limit, extra_toml))
        self.args = [KILND, "--config", config, "--socket", os.path.join(self.dir, "kiln.sock"),
                     "--store", os.path.join(self.dir, "store"), *extra_args]
        self.log = open(os.path.join(self.dir, "kilnd.log"), "w")
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("kilnd exited: " + self.read_log())
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.torch_sock)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("kilnd did not listen within 20 s: " + self.read_log())
                time.sleep(0.02)

    def restart(self):
        """A clean stop (SIGTERM: a deferred queue is written first), then a new kilnd on the
        same config and store."""
        code = self.stop()
        if code != 0:
            raise RuntimeError("kilnd exited %d on SIGTERM: %s" % (code, self.read_log()))
        self.start()

    def url(self):
        return "unix://" + self.torch_sock

    def read_log(self):
        with open(os.path.join(self.dir, "kilnd.log")) as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return code

    def cleanup(self, keep):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if keep:
            print("kilnd folder kept: " + self.dir, file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class KilndCase(unittest.TestCase):
    extra_toml = ""
    extra_args = ()
    durability = "sync"  # each case names its mode rather than relying on kilnd's default

    def setUp(self):
        self.kilnd = Kilnd(self.extra_toml, self.durability, self.extra_args)

    def tearDown(self):
        self.kilnd.cleanup(keep=not getattr(self._outcome, "success", False))


class RoundTrips(KilndCase):
    def test_get_set_round_trips_of_small_and_large_values(self):
        r = redis.Redis.from_url(self.kilnd.url())
        self.assertTrue(r.ping())
        self.assertIsNone(r.get(FX_KEY))
        for size in (100, 1_200_000, 10_000_000):
            value = os.urandom(size)
            key = "pt2:fx-graph-v1::size%d:c1" % size
            self.assertTrue(r.set(key, value, ex=3600))
            self.assertEqual(r.get(key), value)
            self.assertEqual(r.get(key), value)  # hot
        r.close()

    def test_a_new_client_sees_what_another_stored(self):
        a = redis.Redis.from_url(self.kilnd.url())
        b = redis.Redis.from_url(self.kilnd.url())
        a.set(FX_KEY, b'{"data": "xyz"}')
        self.assertEqual(b.get(FX_KEY), b'{"data": "xyz"}')

    def test_nx_and_xx_as_redis_answers_them(self):
        r = redis.Redis.from_url(self.kilnd.url())
        pgo = "pt2:dynamo-pgo::code-state:c1"
        self.assertIsNone(r.set(pgo, b"1", xx=True))
        self.assertTrue(r.set(pgo, b"1", nx=True))
        self.assertIsNone(r.set(pgo, b"2", nx=True))
        self.assertTrue(r.set(pgo, b"3", xx=True))
        self.assertEqual(r.get(pgo), b"3")

    def test_pipelined_commands(self):
        r = redis.Redis.from_url(self.kilnd.url())
        p = r.pipeline(transaction=False)
        p.set("pt2:fx-graph-v1::p1:c1", b"a").set("pt2:fx-graph-v1::p2:c1", b"b")
        p.get("pt2:fx-graph-v1::p1:c1").get("pt2:fx-graph-v1::none:c1").get("pt2:fx-graph-v1::p2:c1")
        self.assertEqual(p.execute(), [True, True, b"a", None, b"b"])

    def test_resp3_when_this_redis_py_speaks_it(self):
        try:
            r = redis.Redis.from_url(self.kilnd.url(), protocol=3)
            r.ping()
        except TypeError:
            self.skipTest("redis-py %s has no protocol=3 (RESP3 is covered by test_kilnd_torch_cache)"
                          % redis.__version__)
        self.assertIsNone(r.get(FX_KEY))
        r.set(FX_KEY, b"v")
        self.assertEqual(r.get(FX_KEY), b"v")

    def test_entries_survive_a_restart(self):
        r = redis.Redis.from_url(self.kilnd.url())
        r.set(FX_KEY, b"kept")
        r.close()
        self.kilnd.restart()
        self.assertEqual(redis.Redis.from_url(self.kilnd.url()).get(FX_KEY), b"kept")


class RoundTripsDeferred(RoundTrips):
    """The same round trips with durability = "deferred": +OK once queued, and the GET right
    after it, on this or another connection, sees the value; a restart keeps it (the SIGTERM
    drain writes the queue)."""
    durability = "deferred"


class StoreLocked:
    """kilnd's index held by another SQLite connection (a backup, an operator's sqlite3):
    kilnd's writes wait on it, as they would on a stuck disk."""

    def __init__(self, kilnd):
        self.db = sqlite3.connect(os.path.join(kilnd.dir, "store", "index.sqlite"), timeout=0,
                                  isolation_level=None)

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc):
        self.db.execute("ROLLBACK")
        self.db.close()


def wait_for(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# redis-py 8 gives up on a reply after 5 s (socket_timeout) with redis.exceptions.TimeoutError,
# which is not a ConnectionError: torch does not catch it, and the user's compile fails. So a
# store that cannot answer must cost a miss (GET) or a closed connection (SET), in time.
REDIS_PY_8_TIMEOUT = 5
# The clients here wait far longer: a reply later than redis-py 8 would wait for is measured
# and fails answered_by_the_reply_limit, instead of being cut off by the client.
SOCKET_TIMEOUT = 60

REPLY_TIMEOUT_MS = 300  # the slow-store cases' torch_cache.reply_timeout_ms


def set_in_time(r, key, value):
    """Whether SET was acknowledged (False: answered late, by closing the connection)."""
    try:
        return bool(r.set(key, value))
    except redis.exceptions.ConnectionError:
        return False


class SlowStoreCase(KilndCase):
    def client(self):
        return redis.Redis.from_url(self.kilnd.url(), socket_timeout=SOCKET_TIMEOUT)

    def answered_by_the_reply_limit(self, t0):
        """The reply that came since t0 was the reply limit's: not before most of that limit
        ran out (kilnd rounds what is left of it down to whole ms; a refusal would come at
        once), and in time for redis-py 8 (the limit, 300 ms, is far below its 5 s)."""
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, REPLY_TIMEOUT_MS / 2000)
        self.assertLess(elapsed, REDIS_PY_8_TIMEOUT)


class SlowStoreSync(SlowStoreCase):
    extra_toml = "reply_timeout_ms = %d\n" % REPLY_TIMEOUT_MS
    extra_args = ("--store-threads", "1")  # the store's one thread is held by the waiting write

    def test_a_get_is_a_miss_and_a_set_a_connection_error_before_redis_py_gives_up(self):
        r = self.client()
        pgo = "pt2:dynamo-pgo::code-state-job1:c1"  # rewritten by torch: not kept in memory
        # Asked again while a loaded disk's fsync outlasts the reply limit (not with a GET,
        # which would keep the value in memory, where the locked store cannot hide it).
        self.assertTrue(wait_for(lambda: set_in_time(r, pgo, b"profile")))
        with StoreLocked(self.kilnd):
            writer = self.client()
            t0 = time.monotonic()
            with self.assertRaises(redis.exceptions.ConnectionError) as refused:
                writer.set(FX_KEY, b"graph")
            self.assertNotIsInstance(refused.exception, redis.exceptions.TimeoutError)
            self.answered_by_the_reply_limit(t0)
            # The store's thread still waits on the index: this GET cannot be read in time.
            t0 = time.monotonic()
            self.assertIsNone(r.get(pgo))
            self.answered_by_the_reply_limit(t0)
            self.assertTrue(r.ping())  # a late GET keeps its connection
        # The SET's write went on once the index was free; the entry read late is served.
        self.assertTrue(wait_for(lambda: r.get(FX_KEY) == b"graph"))
        self.assertEqual(r.get(pgo), b"profile")
        log = self.kilnd.read_log()
        self.assertIn("GET %s: the store did not answer within torch_cache.reply_timeout_ms" % pgo, log)
        self.assertIn("SET %s: timeout: not stored within torch_cache.reply_timeout_ms" % FX_KEY, log)


class SlowStoreDeferred(SlowStoreCase):
    durability = "deferred"
    extra_toml = 'reply_timeout_ms = %d\ndeferred_max_bytes = "1KiB"\n' % REPLY_TIMEOUT_MS

    def test_a_set_waiting_for_room_closes_in_time_and_what_was_acknowledged_is_stored(self):
        r = self.client()
        first, second = os.urandom(2048), os.urandom(2048)
        with StoreLocked(self.kilnd):
            # Larger than the queue's bound alone: taken into the empty queue, acknowledged,
            # and its write waits on the index.
            self.assertTrue(r.set("pt2:fx-graph-v1::first:c1", first))
            t0 = time.monotonic()
            with self.assertRaises(redis.exceptions.ConnectionError) as refused:
                r.set("pt2:fx-graph-v1::second:c1", second)
            self.assertNotIsInstance(refused.exception, redis.exceptions.TimeoutError)
            self.answered_by_the_reply_limit(t0)
        self.assertIn("SET pt2:fx-graph-v1::second:c1: timeout: not stored within torch_cache.reply_timeout_ms",
                      self.kilnd.read_log())
        r = self.client()
        self.assertEqual(r.get("pt2:fx-graph-v1::first:c1"), first)
        self.assertIsNone(r.get("pt2:fx-graph-v1::second:c1"))  # never acknowledged
        self.kilnd.restart()
        r = self.client()
        self.assertEqual(r.get("pt2:fx-graph-v1::first:c1"), first)
        self.assertIsNone(r.get("pt2:fx-graph-v1::second:c1"))


class ReaderOnly(KilndCase):
    extra_toml = '[access]\ntrust_owner = false\nread_users = ["%d"]\nbuild_groups = []\n' % os.getuid()

    def test_set_without_the_build_role_is_a_connection_error_not_a_response_error(self):
        r = redis.Redis.from_url(self.kilnd.url())
        self.assertIsNone(r.get(FX_KEY))
        with self.assertRaises(redis.exceptions.ConnectionError):
            r.set(FX_KEY, b"v")


class NoRole(KilndCase):
    # build_groups = []: the test's group is the socket's, which builds by default.
    extra_toml = '[access]\ntrust_owner = false\nread_users = []\nbuild_groups = []\n'

    def test_get_without_the_read_role_is_a_connection_error(self):
        r = redis.Redis.from_url(self.kilnd.url())
        with self.assertRaises(redis.exceptions.ConnectionError):
            r.get(FX_KEY)


class Password(KilndCase):
    extra_toml = 'password = "hunter2"\n'

    def test_auth_from_the_url(self):
        ok = redis.Redis.from_url("unix://:hunter2@" + self.kilnd.torch_sock)
        ok.set(FX_KEY, b"v")
        self.assertEqual(ok.get(FX_KEY), b"v")
        with self.assertRaises(redis.exceptions.ConnectionError):  # AuthenticationError is one
            redis.Redis.from_url("unix://:wrong@" + self.kilnd.torch_sock).get(FX_KEY)
        with self.assertRaises(redis.exceptions.ConnectionError):
            redis.Redis.from_url(self.kilnd.url()).get(FX_KEY)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kilnd", required=True)
    args, rest = parser.parse_known_args()
    KILND = args.kilnd
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
