package redmutex.bench;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson's side of bench/bench_fair.c: one RedissonClient, N threads
 * waiting on one RFairLock, each holding it for a critical section, for a
 * number of seconds. Prints "acquired N" at the end.
 *
 *   FairHandoff URL THREADS SECONDS HOLD_US
 */
public final class FairHandoff {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        int threads = Integer.parseInt(args[1]);
        double seconds = Double.parseDouble(args[2]);
        long holdUs = Long.parseLong(args[3]);
        Config config = new Config();
        // One connection per waiting thread at most, as redmutex's one client serves them all.
        config.useSingleServer().setAddress(url).setConnectionPoolSize(64).setSubscriptionConnectionPoolSize(64);
        RedissonClient client = Redisson.create(config);
        RLock lock = client.getFairLock("bench:fair");
        AtomicLong acquired = new AtomicLong();
        long start = System.nanoTime() + 2_000_000_000L;
        long end = start + (long) (seconds * 1e9);
        Thread[] ts = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            ts[i] = new Thread(() -> {
                try {
                    while (System.nanoTime() < start)
                        TimeUnit.MICROSECONDS.sleep(100);
                    while (System.nanoTime() < end) {
                        lock.lock();
                        try {
                            TimeUnit.MICROSECONDS.sleep(holdUs);
                            acquired.incrementAndGet();
                        } finally {
                            lock.unlock();
                        }
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            ts[i].start();
        }
        for (Thread t : ts)
            t.join();
        client.shutdown();
        System.out.println("acquired " + acquired.get());
    }
}
