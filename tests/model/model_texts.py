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

# The fidelity corpus: at least 256 teacher-forced positions with either tokenizer, mixing narrative prose,
# facts, a list, numbers and code, so the default path is compared with float32 on varied distributions.
FIDELITY_TEXT = (
    "The lighthouse keeper rose before dawn, as he had done for thirty years. He climbed the spiral stairs, "
    "trimmed the wick, and watched the beam sweep across the grey water. Ships rarely passed that way any more; "
    "the new harbour to the south had taken most of the traffic. Still, he kept the light burning every night.\n\n"
    "Water boils at 100 degrees Celsius at sea level, and freezes at 0 degrees. The speed of light in a vacuum "
    "is about 299,792 kilometres per second. Paris is the capital of France, Berlin the capital of Germany, and "
    "Madrid the capital of Spain. The Pacific is the largest ocean on Earth.\n\n"
    "Shopping list:\n- two loaves of bread\n- a dozen eggs\n- 500 grams of butter\n- apples, pears and plums\n\n"
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "for i in range(10):\n    print(i, fibonacci(i))\n\n"
    "In the spring the village held a market in the square. Farmers brought cheese, honey and early vegetables; "
    "children ran between the stalls, and an old man played the accordion by the fountain until the sun went "
    "down. Everyone agreed it was the best market in years, and they promised to meet again in the autumn.\n\n"
    "Q: What is the largest planet in the solar system?\nA: Jupiter, a gas giant more than eleven times as wide "
    "as Earth.\nQ: Who wrote the play Romeo and Juliet?\nA: William Shakespeare, in the late sixteenth "
    "century.\nQ: How many days are there in a leap year?\nA: There are 366 days in a leap year.\n\n"
    "SELECT name, price FROM products WHERE price > 10 ORDER BY price DESC LIMIT 5;\n\n"
    "Dear Maria,\nThank you for your letter and for the photographs of the garden. The roses look wonderful, "
    "and I can hardly believe how tall the apple tree has grown since I last visited. We are all well here, "
    "although the winter has been long and the roads were closed for a week in January. I hope to come and see "
    "you in the summer, if the trains are running again by then.\nWith love,\nAnna\n\n"
    "The experiment measured the time it takes a ball to roll down a ramp. With the ramp at an angle of twenty "
    "degrees, the ball took 1.8 seconds on average; at thirty degrees it took 1.4 seconds. The students plotted "
    "the results, compared them with the prediction from the laws of motion, and found that friction explained "
    "most of the difference between the two."
)
