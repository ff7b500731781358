"""The small library the mutation-pass tests mutate (test_mutate.py, test_shard.py): a test module imports no other."""

LIBRARY = '''
import functools
import threading

_DONE = set()


def run_once(f):
    lock = threading.Lock()

    @functools.wraps(f)
    def wrapper():
        while wrapper.busy:  # another caller is running f
            pass
        with lock:
            if wrapper.has_run:
                return None
            result = f()
            wrapper.has_run = True
            return result

    wrapper.has_run = False
    wrapper.busy = False
    return wrapper


@run_once
def setup():
    _DONE.add("setup")
    return "ran"


def load_heavy(wanted):
    if not wanted:
        return None
    import json as heavy
    return heavy


def untested():
    return 41
'''
