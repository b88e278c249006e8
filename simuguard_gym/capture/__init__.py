"""Per-substep capture (numpy only): the listeners that copy every substep's state and contacts
into rows and a stage of their own (the recorder, the monitor's tap), the optional C copy that
fills them, the write encoding, and the helper process that encodes chunks off the env's core.
Adapters only say where the engine's memory is (``simuguard_gym.physics.adapter``)."""
