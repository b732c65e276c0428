"""``python -m tunescope.collect``: the sampler process (see :mod:`tunescope.collect._main`)."""

if __name__ == "__main__":
    import signal

    # First thing: Ctrl-C of the training reaches the whole process group, and the sampler
    # must outlive it to record the end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    from tunescope.collect._main import main

    raise SystemExit(main())
