"""Texts the model tests feed to our model and the peers alike."""

# Long enough for 64 teacher-forced positions with either tokenizer.
TEACHER_TEXT = (
    "Once upon a time, in a small village at the edge of a great forest, there lived an old woodcutter and his "
    "three daughters. Every morning he walked into the forest with his axe, and every evening he came home with a "
    "load of wood on his back. One winter the snow fell so deep that the paths disappeared, and the youngest "
    "daughter decided to find the way to the town herself."
)
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Water boils at a temperature of",
)
