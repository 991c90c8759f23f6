from stats import mean, median, percentile

data: list[float] = [3, 1, 4, 1, 5, 9, 2, 6]
print("mean", mean(data))
print("median", median(data))
print("p90", percentile(data, 90))
