package redmutex.bench;

import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson in cluster mode taking and releasing one RLock every 10 ms, for
 * bench/cluster_bench.py:
 *
 *   java -cp ... redmutex.bench.RedissonClusterPace NAME HOST:PORT...
 *
 * Prints the lines bench_cluster's pace mode prints: "ok T0 T1" or
 * "err T0 T1 CLASS", T0 and T1 System.nanoTime() (CLOCK_MONOTONIC on Linux)
 * at the call and at its return. tryLock() is Redisson's non-blocking try
 * with its default watchdog lease; everything else is Redisson's defaults
 * (useClusterServers, scan interval 5 s).
 */
public final class RedissonClusterPace {
    public static void main(String[] args) throws Exception {
        Config config = new Config();
        var cluster = config.useClusterServers();
        for (int i = 1; i < args.length; i++)
            cluster.addNodeAddress("redis://" + args[i]);
        RedissonClient client = Redisson.create(config);
        RLock lock = client.getLock(args[0]);
        for (long next = System.nanoTime();; next += 10_000_000L) {
            long t0 = System.nanoTime();
            try {
                boolean ok = lock.tryLock();
                long t1 = System.nanoTime();
                if (ok) {
                    System.out.println("ok " + t0 + " " + t1);
                    lock.unlock();
                    System.out.println("rel " + t1 + " " + System.nanoTime() + " 0");
                } else {
                    System.out.println("err " + t0 + " " + t1 + " busy");
                }
            } catch (RuntimeException e) {
                System.out.println("err " + t0 + " " + System.nanoTime() + " " + e.getClass().getSimpleName());
            }
            System.out.flush();
            long now = System.nanoTime();
            if (next < now)
                next = now;
            TimeUnit.NANOSECONDS.sleep(Math.max(0, next + 10_000_000L - System.nanoTime()));
        }
    }
}
