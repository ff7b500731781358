"""The source of ``siblings()`` for test modules that pytester writes: the other children of a test child's
zygote (the children it forked ahead for the next tests), read from /proc. Shared by test_faults.py and
test_module_zygotes.py, whose isolated tests look for them."""

FIND_SIBLINGS = '''
def siblings():
    me, parent, found = os.getpid(), os.getppid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == parent:
                        found.append(int(entry))
            except OSError:
                pass
    return found
'''
