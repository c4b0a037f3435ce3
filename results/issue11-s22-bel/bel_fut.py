import cProfile, pstats
exec(open('/tmp/bel_parts.py').read().split('print("future_requests ms"')[0])
print("future_requests ms", t(lambda: p.spfcore_future_requests(views)))
cProfile.run("for _ in range(20): p.spfcore_future_requests(views)", "/tmp/bel_fut.prof")
pstats.Stats("/tmp/bel_fut.prof").sort_stats("tottime").print_stats(12)
