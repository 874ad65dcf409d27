import ConcordTestSupport
import Foundation
import Testing

@testable import notes

/// The shared folder stays quiet: a launch with nothing new writes nothing in the container, a
/// device removes its own stale temporaries, and its own unreadable registration is written
/// again instead of stopping its sync. Each command is a real `notes` process.
@Suite("A quiet container", .serialized)
struct QuietContainerTests {
    let directory = TemporaryDirectory("quiet-container")

    /// Every file under `folder` with its inode and modification time.
    func snapshot(_ folder: URL) throws -> [String: String] {
        var files: [String: String] = [:]
        let base = folder.resolvingSymlinksInPath().path
        let enumerator = FileManager.default.enumerator(atPath: base)
        while let name = enumerator?.nextObject() as? String {
            var info = stat()
            guard lstat(base + "/" + name, &info) == 0 else { continue }
            files[name] = "inode \(info.st_ino) mtime \(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }
        return files
    }

    /// Two devices that synced a note each.
    func devices() throws -> (laptop: NotesDevice, desktop: NotesDevice) {
        let laptop = NotesDevice("laptop", store: "sqlite", in: directory)
        let desktop = NotesDevice("desktop", store: "json", in: directory)
        try laptop.run(["add", "from laptop", "--create"])
        try desktop.run(["add", "from desktop", "--create"])
        try laptop.run(["sync"])
        try desktop.run(["sync"])
        return (laptop, desktop)
    }

    @Test("launches with nothing new leave every file in the container as it was: same inode, same mtime")
    func launchesWriteNothing() throws {
        let (laptop, desktop) = try devices()
        let before = try snapshot(laptop.container)
        #expect(before.keys.contains { $0.hasSuffix("sentinels/laptop.plist") }, "\(before.keys.sorted())")
        for device in [laptop, desktop] {
            #expect(try device.notes().count == 2)
            try device.run(["sync"])
            try device.run(["settings"])
        }
        let after = try snapshot(laptop.container)
        for (name, identity) in before.sorted(by: { $0.key < $1.key }) {
            #expect(after[name] == identity, "\(name) was rewritten: \(identity) -> \(after[name] ?? "gone")")
        }
        #expect(Set(after.keys) == Set(before.keys), "files appeared: \(Set(after.keys).subtracting(before.keys))")
    }

    @Test("a device removes its own stale temporaries, in its folder and the sentinels'; fresh ones and others' stay")
    func staleTemporariesSwept() throws {
        let (laptop, _) = try devices()
        let store = laptop.container.appendingPathComponent("notes")
        let own = store.appendingPathComponent("devices/laptop")
        let sentinels = store.appendingPathComponent("sentinels")
        let old = Date().addingTimeInterval(-3_600)
        func place(_ folder: URL, _ name: String, modified: Date?) throws -> URL {
            let url = folder.appendingPathComponent(name)
            try Data("left by a kill".utf8).write(to: url)
            if let modified {
                try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: url.path)
            }
            return url
        }
        let staleLog = try place(own, ".0000000000000009.cclog.123456.concord-tmp", modified: old)
        let staleAcknowledgement = try place(own, ".applied.json.42.concord-tmp", modified: old)
        let staleRegistration = try place(sentinels, ".laptop.plist.7.concord-tmp", modified: old)
        let fresh = try place(own, ".0000000000000010.cclog.99.concord-tmp", modified: nil)
        let others = try place(sentinels, ".desktop.plist.8.concord-tmp", modified: old)
        let notOurs = try place(own, "notes.txt", modified: old)
        #expect(try laptop.notes().count == 2)
        for url in [staleLog, staleAcknowledgement, staleRegistration] {
            #expect(!FileManager.default.fileExists(atPath: url.path), "\(url.lastPathComponent) was left")
        }
        for url in [fresh, others, notOurs] {
            #expect(FileManager.default.fileExists(atPath: url.path), "\(url.lastPathComponent) was removed")
        }
    }

    @Test("an empty registration of the device's own is written again; the device syncs, with no warning")
    func emptyOwnRegistrationRewritten() throws {
        let (laptop, desktop) = try devices()
        let registration = laptop.container.appendingPathComponent("notes/sentinels/desktop.plist")
        try Data().write(to: registration)
        let outcome = try NotesProcess.run(desktop.arguments(["add", "after the truncation"]), timeout: .seconds(30))
        #expect(outcome.status == 0, "\(outcome.errors)")
        #expect(!outcome.errors.contains("offline"), "the launch went offline: \(outcome.errors)")
        let data = try Data(contentsOf: registration)
        let decoded = try PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any]
        #expect(decoded?["device"] as? String == "desktop", "the registration was not written again")
        // The other device sees the note, and the desktop keeps syncing.
        try laptop.run(["sync"])
        #expect(try laptop.notes().contains { $0.contains("after the truncation") })
        try laptop.run(["add", "back to the desktop"])
        #expect(try desktop.notes().contains { $0.contains("back to the desktop") })
    }
}
