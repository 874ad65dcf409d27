import ConcordTestSupport
import Foundation
import JSONStore
import Persistence
import PlistStore
import StoreConformance
import Testing

/// Several store objects presenting one whole file: each commit by one is reloaded by all the
/// others. Each reload reads the file under coordination, which asks the file's other presenters
/// to relinquish it; done inside the presenter's own callback, two stores reloading at once each
/// waited for the other's presenter queue, forever (a hang seen in a full run under load).
@Suite("Whole-file stores sharing one file")
struct SharedFileReloadTests {
    @Test(
        "Three objects on one file: every commit reaches the two others, with no deadlock between their reloads",
        arguments: ["json", "plist"]
    )
    func reloadsDoNotDeadlock(_ type: String) throws {
        let directory = TemporaryDirectory("shared-reload")
        let url = directory("shared.\(type)")
        func open() throws -> any PersistentStore {
            type == "json"
                ? try JSONStore(url: url, schema: ConformanceSchema.v1, options: StoreOptions())
                : try PlistStore(url: url, schema: ConformanceSchema.v1, options: StoreOptions())
        }
        let writer = try open()
        defer { writer.close() }
        let readers = [try open(), try open()]
        defer { for reader in readers { reader.close() } }
        let heard = readers.map { _ in Signal() }
        let tokens = zip(readers, heard).map { reader, signal in
            reader.events.addListener { event in if event.kind == .changedExternally { signal.fire() } }
        }
        defer { for (reader, token) in zip(readers, tokens) { reader.events.removeListener(token) } }

        for index in 1...25 {
            try writer.commit(
                StoreChanges(inserts: [
                    Record(
                        id: .deterministic(entity: "Item", name: "\(index)"),
                        values: ["title": .string("item \(index)")]
                    )
                ])
            )
            for (number, (reader, signal)) in zip(readers, heard).enumerated() {
                // Each commit is reported at least once (two commits may be read in one reload).
                let deadline = ContinuousClock.now + .seconds(20)
                var count = try reader.count(for: FetchRequest(entity: "Item"))
                while count < index, ContinuousClock.now < deadline {
                    signal.wait(times: signal.value + 1, timeout: .milliseconds(500))
                    count = try reader.count(for: FetchRequest(entity: "Item"))
                }
                #expect(
                    count == index,
                    "reader \(number) holds \(count) records 20 s after commit \(index); changedExternally heard \(signal.value) times"
                )
                if count != index { return }
            }
        }
    }
}
