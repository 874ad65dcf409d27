import ConcordTestSupport
import FileCoordination
import Foundation
import Synchronization
import Testing

/// Checks, from inside the accessors, that no two coordinations that must exclude each other
/// ever overlap: the hierarchical rules, observed.
final class ExclusionAuditor: Sendable {
    private struct Access: Hashable {
        var path: String
        var writing: Bool
        var coversContents: Bool
        var id: Int
    }
    private let active = Mutex<[Access]>([])
    private let violations = Mutex<[String]>([])
    private let nextID = Atomic<Int>(0)

    var recordedViolations: [String] { violations.withLock { $0 } }

    func enter(_ intents: [FileAccessIntent]) -> Int {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let mine = intents.map { intent -> Access in
            switch intent.access {
            case .reading: return Access(path: intent.url.path, writing: false, coversContents: false, id: id)
            case .writing(let options):
                return Access(
                    path: intent.url.path,
                    writing: true,
                    coversContents: !options.isDisjoint(with: [.forDeleting, .forMoving, .forReplacing]),
                    id: id
                )
            }
        }
        active.withLock { active in
            for access in mine {
                for other in active where other.id != id {
                    if let problem = conflict(access, other) { violations.withLock { $0.append(problem) } }
                }
            }
            active.append(contentsOf: mine)
        }
        return id
    }

    func leave(_ id: Int) {
        active.withLock { $0.removeAll { $0.id == id } }
    }

    private func conflict(_ a: Access, _ b: Access) -> String? {
        if a.path == b.path && (a.writing || b.writing) { return "\(a.path): write overlaps another access" }
        if a.coversContents && b.path.hasPrefix(a.path + "/") {
            return "\(b.path) accessed inside \(a.path) while it was being replaced"
        }
        if b.coversContents && a.path.hasPrefix(b.path + "/") {
            return "\(a.path) accessed inside \(b.path) while it was being replaced"
        }
        return nil
    }
}

/// A small, seedable generator so a failing run can be replayed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
}

@Suite("Deadlock freedom of multi-item coordination")
struct DeadlockFreedomTests {
    let directory = TemporaryDirectory("deadlock")

    @Test("Many threads doing random multi-item coordinations over a nested tree all finish, never overlapping wrongly")
    func randomMultiItemCoordinations() {
        let base = directory.url
        let paths = [
            "a", "a/x.txt", "a/b", "a/b/y.txt", "a/b/c", "a/b/c/z.txt", "d", "d/w.txt", "d/e", "d/e/v.txt", "u.txt",
            "t.txt",
        ].map { base.appendingPathComponent($0) }
        for folder in ["a/b/c", "d/e"] { directory.makeDirectory(folder) }

        let threads = 8
        let iterations = 150
        let seed = UInt64.random(in: 0 ... .max)
        let auditor = ExclusionAuditor()
        let failures = Mutex<[String]>([])
        let finished = Signal()

        for thread in 0..<threads {
            Thread.detachNewThread {
                var random = SplitMix64(state: seed &+ UInt64(thread))
                let coordinator = FileCoordinator()
                // A deadlock shows up as a timeout, not as a hung test.
                coordinator.timeout = .seconds(30)
                for _ in 0..<iterations {
                    let count = Int.random(in: 1...4, using: &random)
                    let intents = (0..<count).map { _ -> FileAccessIntent in
                        let url = paths.randomElement(using: &random)!
                        switch Int.random(in: 0..<6, using: &random) {
                        case 0, 1, 2: return .readingIntent(with: url)
                        case 3: return .writingIntent(with: url)
                        case 4: return .writingIntent(with: url, options: .forMerging)
                        default:
                            let options: [FileCoordinator.WritingOptions] = [.forDeleting, .forMoving, .forReplacing]
                            return .writingIntent(with: url, options: options.randomElement(using: &random)!)
                        }
                    }
                    do {
                        try coordinator.coordinate(with: intents) { _ in
                            let id = auditor.enter(intents)
                            // Hold briefly so overlaps, if allowed, would be seen.
                            for _ in 0..<Int.random(in: 0...200, using: &random) { _ = random.next() }
                            sched_yield()
                            auditor.leave(id)
                        }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                    }
                }
                finished.fire()
            }
        }
        let allFinished = finished.wait(times: threads, timeout: .seconds(120))
        #expect(allFinished, "threads stuck (seed \(seed))")
        #expect(failures.withLock { $0 }.isEmpty, "seed \(seed)")
        #expect(auditor.recordedViolations.isEmpty, "seed \(seed): \(auditor.recordedViolations.prefix(5))")
    }

    @Test("Two coordinations naming the same items in opposite orders never deadlock")
    func oppositeOrders() {
        let one = directory("one.txt")
        let two = directory("two.txt")
        let rounds = 300
        let done = Signal()
        for reversed in [false, true] {
            Thread.detachNewThread {
                let coordinator = FileCoordinator()
                coordinator.timeout = .seconds(30)
                for _ in 0..<rounds {
                    let (first, second) = reversed ? (two, one) : (one, two)
                    try? coordinator.coordinate(writingItemAt: first, writingItemAt: second) { _, _ in }
                }
                done.fire()
            }
        }
        #expect(done.wait(times: 2, timeout: .seconds(60)))
    }
}
