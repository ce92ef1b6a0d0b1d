from engine.calc.pareto import on_frontier


def test_dominated_points_are_off_the_frontier():
    # (tokens/s each user, total tokens/s): batch 1, 2, 4, 8 trade one for the other; the
    # fifth is worse than batch 4 on both axes, the sixth equals batch 8
    points = [(100, 100), (95, 190), (80, 320), (50, 400), (70, 300), (50, 400)]
    assert on_frontier(points) == [True, True, True, True, False, True]


def test_missing_values_are_never_on_it():
    assert on_frontier([(None, 5), (1.0, float("nan")), (2.0, 3.0)]) == [False, False, True]
    assert on_frontier([]) == []
