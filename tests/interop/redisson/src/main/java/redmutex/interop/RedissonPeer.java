package redmutex.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.RedissonMultiLock;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * A Redisson client driven line by line over stdin, so a test in another
 * language can make a real Java service take and release locks. Arguments:
 * a server address (redis://h:p), or a cluster's node addresses separated by
 * commas followed by the word "cluster" (Redisson's useClusterServers).
 *
 *   lock NAME            lock() (blocking, watchdog lease)          -> OK
 *   trylock NAME MS      tryLock(MS ms)                             -> OK|BUSY <elapsed ms>
 *   unlock NAME          unlock()                                   -> OK | ERR <message>
 *   state NAME           isLocked, held by this thread, hold count, remaining TTL
 *   fence NAME           RFencedLock.lockAndGetToken()              -> TOKEN <n>
 *   funlock NAME         RFencedLock.unlock()                       -> OK
 *   fairlock NAME        getFairLock(NAME).lock()                   -> OK
 *   fairtry NAME MS      getFairLock(NAME).tryLock(MS ms)           -> OK|BUSY <elapsed ms>
 *   fairunlock NAME      getFairLock(NAME).unlock()                 -> OK
 *   readlock NAME / readtry NAME MS / readunlock NAME     getReadWriteLock(NAME).readLock()
 *   writelock NAME / writetry NAME MS / writeunlock NAME  getReadWriteLock(NAME).writeLock()
 *   whoami               the current thread's lock owner id          -> ID <uuid>:<thread id>
 *   semset NAME N        RPermitExpirableSemaphore.trySetPermits(N)  -> SET true|false
 *   semtry NAME WAIT LEASE  tryAcquire(WAIT ms, LEASE ms; -1: none)  -> PERMIT <id> | NONE
 *   semrelease NAME ID   release(ID)                                 -> OK | ERR <message>
 *   semavail NAME        availablePermits()                          -> AVAIL <n>
 *   latchset NAME N      RCountDownLatch.trySetCount(N)              -> SET true|false
 *   latchdown NAME       countDown()                                 -> OK
 *   latchawait NAME MS   await(MS ms)                                -> DONE true|false <elapsed ms>
 *   latchcount NAME      getCount()                                  -> COUNT <n>
 *   multilock MS NAME..  RedissonMultiLock(getLock(NAME)...).tryLock(MS ms) -> OK|BUSY <elapsed ms>
 *   multiunlock NAME..   the same multi-lock's unlock()              -> OK
 *   quit
 *
 * A line may start with "@TAG ": the command then runs on a Java thread of
 * its own for that tag (one thread per tag, made on first use), and its reply
 * is "@TAG <reply>". Untagged commands run on the main thread. So one peer
 * can hold several waiters of one lock, each a different Redisson owner.
 */
public final class RedissonPeer {
    private static final Object OUT = new Object();

    public static void main(String[] args) throws Exception {
        Config config = new Config();
        if (args.length > 1 && args[1].equals("cluster")) {
            // A Redis Cluster: args[0] is its nodes, "redis://h:p,redis://h:p,...". Redisson routes by
            // hash slot and waits on sharded pub/sub (SSUBSCRIBE) on 7.0+ (its subscription mode AUTO).
            config.useClusterServers().addNodeAddress(args[0].split(",")).setMasterConnectionMinimumIdleSize(1)
                    .setMasterConnectionPoolSize(8).setSubscriptionConnectionMinimumIdleSize(1)
                    .setSubscriptionConnectionPoolSize(4).setScanInterval(1000);
        } else {
            config.useSingleServer().setAddress(args[0]).setConnectionMinimumIdleSize(1).setConnectionPoolSize(8)
                    .setSubscriptionConnectionMinimumIdleSize(1).setSubscriptionConnectionPoolSize(4);
        }
        RedissonClient redisson = Redisson.create(config);
        reply("READY " + redisson.getId());
        Map<String, ExecutorService> threads = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].startsWith("@")) {
                String tag = w[0];
                String[] cmd = java.util.Arrays.copyOfRange(w, 1, w.length);
                threads.computeIfAbsent(tag, t -> Executors.newSingleThreadExecutor())
                        .submit(() -> reply(tag + " " + run(redisson, cmd)));
                continue;
            }
            if (w[0].equals("quit")) {
                threads.values().forEach(ExecutorService::shutdownNow);
                redisson.shutdown();
                reply("BYE");
                return;
            }
            reply(run(redisson, w));
        }
        threads.values().forEach(ExecutorService::shutdownNow);
        redisson.shutdown();
    }

    private static void reply(String s) {
        synchronized (OUT) {
            System.out.println(s);
            System.out.flush();
        }
    }

    private static String timed(RLock l, long ms) throws InterruptedException {
        long start = System.nanoTime();
        boolean ok = l.tryLock(ms, TimeUnit.MILLISECONDS);
        return (ok ? "OK " : "BUSY ") + (System.nanoTime() - start) / 1_000_000;
    }

    private static RedissonMultiLock multi(RedissonClient redisson, String[] w, int from) {
        RLock[] locks = new RLock[w.length - from];
        for (int i = from; i < w.length; i++)
            locks[i - from] = redisson.getLock(w[i]);
        return new RedissonMultiLock(locks);
    }

    /* Semaphores, latches and multi-locks (redmutex's issue 25). */
    private static String runMore(RedissonClient redisson, String[] w) throws InterruptedException {
        switch (w[0]) {
            case "semset":
                return "SET " + redisson.getPermitExpirableSemaphore(w[1]).trySetPermits(Integer.parseInt(w[2]));
            case "semtry": {
                String id = redisson.getPermitExpirableSemaphore(w[1]).tryAcquire(Long.parseLong(w[2]),
                        Long.parseLong(w[3]), TimeUnit.MILLISECONDS);
                return id == null ? "NONE" : "PERMIT " + id;
            }
            case "semrelease":
                redisson.getPermitExpirableSemaphore(w[1]).release(w[2]);
                return "OK";
            case "semavail":
                return "AVAIL " + redisson.getPermitExpirableSemaphore(w[1]).availablePermits();
            case "latchset":
                return "SET " + redisson.getCountDownLatch(w[1]).trySetCount(Long.parseLong(w[2]));
            case "latchdown":
                redisson.getCountDownLatch(w[1]).countDown();
                return "OK";
            case "latchawait": {
                long start = System.nanoTime();
                boolean done = redisson.getCountDownLatch(w[1]).await(Long.parseLong(w[2]), TimeUnit.MILLISECONDS);
                return "DONE " + done + " " + (System.nanoTime() - start) / 1_000_000;
            }
            case "latchcount":
                return "COUNT " + redisson.getCountDownLatch(w[1]).getCount();
            case "multilock": {
                long start = System.nanoTime();
                boolean ok = multi(redisson, w, 2).tryLock(Long.parseLong(w[1]), TimeUnit.MILLISECONDS);
                return (ok ? "OK " : "BUSY ") + (System.nanoTime() - start) / 1_000_000;
            }
            case "multiunlock":
                multi(redisson, w, 1).unlock();
                return "OK";
            default:
                return "ERR unknown command " + w[0];
        }
    }

    private static String run(RedissonClient redisson, String[] w) {
        try {
            switch (w[0]) {
                case "lock":
                    redisson.getLock(w[1]).lock();
                    return "OK";
                case "trylock":
                    return timed(redisson.getLock(w[1]), Long.parseLong(w[2]));
                case "unlock":
                    redisson.getLock(w[1]).unlock();
                    return "OK";
                case "state": {
                    RLock l = redisson.getLock(w[1]);
                    return "LOCKED " + l.isLocked() + " HELD " + l.isHeldByCurrentThread() + " COUNT "
                            + l.getHoldCount() + " TTL " + l.remainTimeToLive();
                }
                case "fence": {
                    RFencedLock l = redisson.getFencedLock(w[1]);
                    return "TOKEN " + l.lockAndGetToken();
                }
                case "funlock":
                    redisson.getFencedLock(w[1]).unlock();
                    return "OK";
                case "fairlock":
                    redisson.getFairLock(w[1]).lock();
                    return "OK";
                case "fairtry":
                    return timed(redisson.getFairLock(w[1]), Long.parseLong(w[2]));
                case "fairunlock":
                    redisson.getFairLock(w[1]).unlock();
                    return "OK";
                case "readlock":
                    redisson.getReadWriteLock(w[1]).readLock().lock();
                    return "OK";
                case "readtry":
                    return timed(redisson.getReadWriteLock(w[1]).readLock(), Long.parseLong(w[2]));
                case "readunlock":
                    redisson.getReadWriteLock(w[1]).readLock().unlock();
                    return "OK";
                case "writelock":
                    redisson.getReadWriteLock(w[1]).writeLock().lock();
                    return "OK";
                case "writetry":
                    return timed(redisson.getReadWriteLock(w[1]).writeLock(), Long.parseLong(w[2]));
                case "writeunlock":
                    redisson.getReadWriteLock(w[1]).writeLock().unlock();
                    return "OK";
                case "whoami":
                    return "ID " + redisson.getId() + ":" + Thread.currentThread().getId();
                default:
                    return runMore(redisson, w);
            }
        } catch (Exception e) {
            return "ERR " + e.getClass().getSimpleName() + ": " + e.getMessage();
        }
    }
}
