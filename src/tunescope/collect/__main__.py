"""``python -m tunescope.collect``: the sampler process (see :mod:`tunescope.collect._main`)."""

if __name__ == "__main__":
    import signal
    import sys

    # First thing: Ctrl-C and a closing terminal reach the whole process group, and the
    # sampler must outlive the training to record its end. tunescope run blocks these while
    # it starts us; the command we start gets them back at their defaults.
    for _sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(_sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())

    from tunescope._env import ENV_SAMPLER_SPEC
    from tunescope.collect._spawn import spawn_from_argv

    # run mode: the command starts before the imports
    _spawned = spawn_from_argv(sys.argv[1:], ENV_SAMPLER_SPEC)

    from tunescope.collect._main import main

    raise SystemExit(main(spawned=_spawned))
