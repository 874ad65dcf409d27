import Foundation
import Synchronization

/// A small, seeded random generator (SplitMix64): each worker has its own.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The random edits one worker makes on one device: one `notes` command at a time, on notes and
/// folders that device knows of (its own, and what its watch process saw arrive). Staged notes
/// (titles `staged-...`) and the folders the staged clashes delete are left alone, so that
/// their outcome is the clash's.
struct NotesWorker {
    let device: EngineDevice
    let name: String
    let ledger: Ledger
    let watch: WatchProcess
    var random: SeededGenerator
    private var count = 0

    static let stableFolders = ["Inbox", "Work", "Home"]

    init(device: EngineDevice, name: String, ledger: Ledger, watch: WatchProcess, seed: UInt64) {
        self.device = device
        self.name = name
        self.ledger = ledger
        self.watch = watch
        random = SeededGenerator(seed: seed)
    }

    /// Runs commands until `end` (time since the run began), with a short random pause between.
    mutating func run(until end: Duration) {
        while ledger.now < end {
            step()
            Thread.sleep(forTimeInterval: Double.random(in: 0.05...0.3, using: &random))
        }
    }

    /// The notes this device may edit: ones it added or saw arrive, not staged, not deleted.
    private func knownNotes() -> [String] {
        let entries = ledger.all
        let deleted = Set(
            entries.compactMap { entry -> String? in
                guard entry.acknowledged, case .deleteNote(let id) = entry.operation else { return nil }
                return id
            }
        )
        var known: [String] = entries.filter { $0.device == device.name }.compactMap { entry in
            guard case .addNote(let title, _, _, _) = entry.operation, !title.hasPrefix("staged-") else { return nil }
            return entry.addedID
        }
        for line in watch.lines where line.hasPrefix("+ note ") {
            if let note = NoteLine(line), note.title?.hasPrefix("staged-") == false { known.append(note.id) }
        }
        return Array(Set(known).subtracting(deleted)).sorted()
    }

    /// The folders this device may file into: the stable ones and the staged ones it has made or
    /// seen arrive (never the ones the clashes delete).
    private func knownFolders() -> [String] {
        var folders = Set(Self.stableFolders)
        for entry in ledger.all where entry.device == device.name && entry.acknowledged {
            if case .addFolder(let name) = entry.operation { folders.insert(name) }
        }
        for line in watch.lines where line.hasPrefix("+ folder ") {
            if let range = line.range(of: "name=\""), line.hasSuffix("\"") {
                folders.insert(String(line[range.upperBound..<line.index(before: line.endIndex)]))
            }
        }
        return folders.filter { !$0.hasPrefix("Doomed") }.sorted()
    }

    private mutating func step() {
        count += 1
        let title = "t-\(device.name)-\(name)-\(count)"
        let notes = knownNotes()
        let folders = knownFolders()
        let roll = Int.random(in: 0..<100, using: &random)
        let operation: NotesOperation
        if notes.isEmpty || roll < 30 {
            operation = .addNote(
                title: title,
                folder: folders.randomElement(using: &random)!,
                tag: Bool.random(using: &random) ? ["red", "blue"].randomElement(using: &random) : nil,
                pin: Int.random(in: 0..<5, using: &random) == 0
            )
        } else {
            let note = notes.randomElement(using: &random)!
            switch roll {
            case 30..<45: operation = .editNote(id: note, title: title + "e")
            case 45..<65: operation = .editNote(id: note, folder: folders.randomElement(using: &random)!)
            case 65..<75: operation = .editNote(id: note, body: "body \(title)", pin: Bool.random(using: &random))
            case 75..<85:
                operation = .tagNote(
                    id: note,
                    label: ["red", "blue", "green"].randomElement(using: &random)!,
                    remove: Bool.random(using: &random)
                )
            case 85..<92: operation = .deleteNote(id: note)
            default: operation = .list
            }
        }
        ledger.run(operation, on: device, by: name)
    }
}
