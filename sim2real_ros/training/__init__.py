"""Training in the randomized sim: scripted IK teacher, vision student, behavior cloning + DAgger."""
